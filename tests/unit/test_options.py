from __future__ import annotations

import argparse

import pytest

from sidecar.options import add_arguments, from_args
from sidecar.settings import SidecarSettings


def parse(argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser, SidecarSettings)
    return from_args(SidecarSettings, parser.parse_args(argv))


def test_flag_beats_environment_beats_default(monkeypatch):
    assert parse([]).grpc_port == 50051
    monkeypatch.setenv("QOS_GRPC_PORT", "6000")
    assert parse([]).grpc_port == 6000
    assert parse(["--grpc-port", "7000"]).grpc_port == 7000


def test_redis_url_comes_from_the_shared_variable(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://10.0.0.1:6380/2")
    assert parse([]).redis_url == "redis://10.0.0.1:6380/2"
    assert parse([]).grpc_address == "127.0.0.1:50051"


def test_a_redis_socket_waits_at_least_as_long_as_a_decision_may():
    assert parse([]).redis_socket_timeout == 0.25
    assert parse(["--redis-socket-timeout-ms", "2000"]).redis_socket_timeout == 2.0
    assert parse(["--redis-timeout-ms", "500"]).redis_socket_timeout == 0.5


def test_boolean_variables_take_booleans_and_refuse_the_rest(monkeypatch):
    for raw, expected in (("true", True), ("ON", True), ("1", True), ("no", False), ("", False)):
        monkeypatch.setenv("QOS_OVER_LIMIT_CACHE", raw)
        assert parse([]).over_limit_cache is expected, raw
    for typo in ("ture", "enabled", "2"):
        monkeypatch.setenv("QOS_OVER_LIMIT_CACHE", typo)
        with pytest.raises(SystemExit) as refused:
            parse([])
        assert "QOS_OVER_LIMIT_CACHE" in str(refused.value) and typo in str(refused.value)


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_command_prints_its_help():
    from sidecar.cli import build_parser

    helps = {p.prog: " ".join(p.format_help().split()) for p in _parsers(build_parser())}
    assert "qos-sidecar bench promo" in helps
    assert "80 % of it" in helps["qos-sidecar bench promo"]
