"""The operator commands as scripts use them, against a real redis-server: every command
that reads prints one JSON document with --output json (nothing else on standard
output), and the exit codes are the documented ones: 0 done, 1 Redis unreachable, 2 a
refusal (or a usage error); a boolean variable that is not a boolean is refused, named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from sidecar.ports import free_port

pytestmark = pytest.mark.integration


def run(redis_url: str, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args, "--redis-url", redis_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "QOS_OPERATOR": "script", **(env or {})},
        check=False,
    )


def read(redis_url: str, *args: str):
    done = run(redis_url, *args, "--output", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_reading_command_prints_one_json_document(redis_url, tmp_path):
    assert run(redis_url, "tenants", "add", "checkout", "--tier", "p0").returncode == 0
    assert (
        run(redis_url, "tenants", "add", "reports", "--tier", "p2", "--rate", "500").returncode == 0
    )
    assert run(redis_url, "mode", "set", "core-only", "--by", "alice").returncode == 0

    tenants = read(redis_url, "tenants", "list")
    assert [(t["name"], t["tier"], t["keys"]) for t in tenants] == [
        ("checkout", "p0", 1),
        ("reports", "p2", 1),
    ]
    assert tenants[1]["rate_tokens_per_second"] == 500
    mode = read(redis_url, "mode", "get")
    assert mode["mode"] == "core-only" and mode["force_shed"] == []
    assert mode["last_switch"]["by"] == "alice"
    (switch,) = read(redis_url, "mode", "log")
    assert switch["what"] == "mode core-only"
    shown = read(redis_url, "config", "show")
    assert shown["tenants"] == 2 and shown["config"]["tiers"]["p2"]["share"] > 0
    wanted = tmp_path / "qos.yaml"
    wanted.write_text(yaml.safe_dump({"tiers": {"p2": {"share": 0.02}}}))
    (change,) = [c for c in read(redis_url, "config", "diff", str(wanted)) if "p2" in c["field"]]
    assert change["field"] == "tiers.p2.share" and change["new"] == "0.02"
    top = read(redis_url, "tenants", "top")
    assert {(row["pool"], row["tier"]) for row in top} >= {("default", "p0"), ("default", "p2")}
    assert isinstance(read(redis_url, "audit"), list)


def test_exit_codes_say_what_went_wrong(redis_url):
    refused = run(redis_url, "tenants", "remove", "nobody")
    assert refused.returncode == 2 and "nobody" in refused.stderr
    unreachable = run(f"redis://127.0.0.1:{free_port()}/0", "mode", "get")
    assert unreachable.returncode == 1 and "Redis" in unreachable.stderr
    typo = run(redis_url, "mode", "get", env={"QOS_REDIS_CLUSTER": "ture"})
    assert typo.returncode != 0 and "QOS_REDIS_CLUSTER" in typo.stderr
    assert run(redis_url, "mode", "get", env={"QOS_REDIS_CLUSTER": "false"}).returncode == 0
