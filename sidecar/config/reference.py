"""The configuration reference, generated from the schema itself: every key, its type,
its default and what it means (the comments above each field of its models). Written to
docs/configuration-reference.md by `python tools/gen_config_reference.py`; a test fails
when the committed page is not what this generates."""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from sidecar.config.schema import QosConfig

TIERS = ("p0", "p1", "p2")
_FIELD = re.compile(r"^    (\w+):")


def markdown() -> str:
    rows = "\n".join(
        f"| `{key}` | {kind} | {default} | {meaning} |" for key, kind, default, meaning in rows_of()
    )
    return (
        "# Configuration reference\n\n"
        "Generated from the schema (`sidecar/config/schema.py` and the models it uses) by"
        " `python tools/gen_config_reference.py`"
        " (a test fails when this page and the schema differ). Set a key with `qos-sidecar"
        " config set KEY VALUE`; `pN` is each tier, `NAME` a pool's name, `PATH` a route's"
        " path. A tier's defaults are given P0 / P1 / P2 where they differ.\n\n"
        "| key | type | default | meaning |\n|---|---|---|---|\n" + rows + "\n"
    )


def rows_of(
    model: type[BaseModel] = QosConfig, prefix: str = "", instance: BaseModel | None = None
) -> Iterator[tuple[str, ...]]:
    """(key, type, default, meaning) of every key under `model`, its defaults those of
    `instance` (the model's own when none)."""
    meanings = _comments(model)
    instance = instance if instance is not None else model()
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        default = getattr(instance, name)
        if isinstance(default, BaseModel):
            yield from _nested(default, f"{key}.")
        elif typing.get_origin(annotation) is dict:
            yield from _mapping(key, annotation, meanings.get(name, ""))
        else:
            yield key, _kind(annotation, field.metadata), _shown(default), meanings.get(name, "")


def _nested(value: BaseModel, prefix: str) -> Iterator[tuple[str, ...]]:
    model = type(value)
    if list(model.model_fields) != list(TIERS):
        yield from rows_of(model, prefix, value)
        return
    # One row a setting, the tiers' defaults side by side.
    tiers = [getattr(value, tier) for tier in TIERS]
    if isinstance(tiers[0], BaseModel):
        per_tier = [list(rows_of(type(tier), "", tier)) for tier in tiers]
        for rows in zip(*per_tier, strict=True):
            key, kind, _, meaning = rows[0]
            defaults = [row[2] for row in rows]
            shown = defaults[0] if len(set(defaults)) == 1 else " / ".join(defaults)
            yield f"{prefix}pN.{key}", kind, shown, meaning
        return
    field = model.model_fields["p0"]
    meaning = _comments(model).get("p1", "")
    yield (
        f"{prefix}pN",
        _kind(field.annotation, field.metadata),
        " / ".join(map(_shown, tiers)),
        meaning,
    )


def _mapping(key: str, annotation: Any, meaning: str) -> Iterator[tuple[str, ...]]:
    _, value = typing.get_args(annotation)
    if inspect.isclass(value) and issubclass(value, BaseModel):
        yield f"{key}.NAME", "a mapping", "none", meaning
        for sub, kind, default, sub_meaning in rows_of(value, ""):
            yield f"{key}.NAME.{sub}", kind, default, sub_meaning
        return
    name = "PATH" if key == "routes" else "NAME"
    yield f"{key}.{name}", _kind(value, ()), "none", meaning


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Per field, the comment lines right above it and the one after it on its line."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (inspect.isclass(cls) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            lines = inspect.getsource(cls).splitlines()
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        for line in lines:
            stripped = line.strip()
            if stripped.startswith("#"):
                pending.append(stripped.lstrip("#").strip())
                continue
            match = _FIELD.match(line)
            if match:
                inline = line.split("  # ", 1)[1].strip() if "  # " in line else ""
                text = " ".join([*pending, inline]).strip()
                if text:
                    found[match.group(1)] = text.replace("|", "\\|")
            pending = []
    return found


def _kind(annotation: Any, metadata: Any) -> str:
    bounds = []
    for item in metadata or ():
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(
                    f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}"
                )
        if getattr(item, "pattern", None):
            bounds.append("a name")
    return _type_name(annotation) + (f" ({', '.join(bounds)})" if bounds else "")


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or none" if type(None) in args else "")
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (tuple, frozenset, list):
        return f"list of {_type_name(args[0])}"
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return " or ".join(f"`{member.value}`" for member in annotation)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "an object"  # a section's keys, as under its top-level name
    return {float: "number", int: "integer", bool: "boolean", str: "text"}.get(
        annotation, str(annotation)
    )


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, frozenset, list)):
        return "[" + ", ".join(_shown(v).strip("`") for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    if isinstance(value, str):
        return f"`{value}`" if len(value) < 40 else f"`{value[:37]}...`"
    return str(value)
