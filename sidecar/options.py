"""Settings objects whose fields are also command-line flags and environment variables.

A field is declared once, with ``setting(default, env, help)``; its flag is derived from
its name (``grpc_port`` → ``--grpc-port``). A flag beats the environment, which beats
the default. A secret (``secret(env, help)``) has no flag: it is read from the
environment alone, so it never shows in a process list.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def setting(default: Any, env: str | None, help: str) -> Any:
    return dataclasses.field(default=default, metadata={"env": env, "help": help})


def secret(env: str, help: str) -> Any:
    """A setting read only from the environment variable `env` ("" when unset)."""
    return dataclasses.field(default="", metadata={"env": env, "help": help, "secret": True})


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, settings_class: type) -> None:
    hints = typing.get_type_hints(settings_class)
    secrets = []
    for field in dataclasses.fields(settings_class):
        env = field.metadata.get("env")
        if field.metadata.get("secret"):
            secrets.append(f"{env}: {field.metadata.get('help', '')}")
            continue
        suffix = f" [env {env}]" if env else ""
        kwargs: dict[str, Any] = {"dest": field.name, "default": None}
        if hints[field.name] is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = hints[field.name]
        text = f"{field.metadata.get('help', '')} (default: {field.default}){suffix}"
        # argparse formats help with %: a setting's text is plain, so its % is literal.
        parser.add_argument(_flag(field.name), help=text.replace("%", "%%"), **kwargs)
    if secrets:
        parser.epilog = "secrets, from the environment only (never a flag): " + "; ".join(secrets)


def from_args(settings_class: type[T], args: argparse.Namespace) -> T:
    hints = typing.get_type_hints(settings_class)
    values = {}
    for field in dataclasses.fields(settings_class):  # type: ignore[arg-type]
        value = getattr(args, field.name, None)
        env = field.metadata.get("env")
        if value is None and env and env in os.environ:
            value = _parse_env(env, hints[field.name], os.environ[env])
        if value is not None:
            values[field.name] = value
    return settings_class(**values)


def _parse_env(env: str, kind: type, raw: str) -> Any:
    if kind is bool:
        return env_bool(env, raw)
    try:
        return kind(raw)
    except ValueError as exc:
        raise SystemExit(f"{env}={raw!r}: {exc}") from None


TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def env_bool(env: str, raw: str) -> bool:
    """A boolean environment variable; anything else ends the program naming it (a typo
    read as false would turn a switch off silently)."""
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise SystemExit(f"{env}={raw!r} is not a boolean: use one of {', '.join(TRUE + FALSE[:-1])}")


def as_environment(settings: Any) -> tuple[dict[str, str], list[str]]:
    """`settings` again for another process: environment variables for the fields that
    have one (secrets stay off its command line), flags for the others."""
    environment: dict[str, str] = {}
    flags: list[str] = []
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        env = field.metadata.get("env")
        if env:
            environment[env] = text
        elif isinstance(value, bool):
            flags.append(_flag(field.name) if value else "--no-" + _flag(field.name)[2:])
        else:
            flags += [_flag(field.name), text]
    return environment, flags
