"""`qos-sidecar config validate` and `config schema`, run as a user runs them, with no
Redis anywhere: every file a sidecar refuses is refused alike, with the same words; the
schema takes the shipped files and refuses a bad one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from sidecar.config.files import FileRefused, read_config, read_tenants
from sidecar.ports import free_port
from tests.unit.bad_files import (
    BAD_CONFIGURATIONS,
    BAD_TENANTS,
    TENANTS_NOT_WHOLE,
    TENANTS_NOT_WHOLE_IDS,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONFIGURATIONS = sorted((REPO / "deploy").rglob("qos.yaml"))


def qos_sidecar(*args: str) -> subprocess.CompletedProcess[str]:
    # A Redis URL where nothing listens: the commands must not need one.
    environment = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "config", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        cwd=REPO,
    )


def refusal_by_the_sidecar(path: Path, kind: str) -> str:
    with pytest.raises(FileRefused) as refused:
        (read_tenants if kind == "tenants" else read_config)(path)
    return str(refused.value)


CASES = [
    *[pytest.param(text, said, "config", id=f"config-{i}") for i, (text, said) in
      enumerate(BAD_CONFIGURATIONS)],
    *[pytest.param(text, said, "tenants", id=f"tenants-{i}") for i, (text, said) in
      enumerate(BAD_TENANTS)],
    *[pytest.param(text, said, "tenants", id=name) for (text, said), name in
      zip(TENANTS_NOT_WHOLE, TENANTS_NOT_WHOLE_IDS, strict=True)],
]  # fmt: skip


@pytest.mark.parametrize(("text", "said", "kind"), CASES)
def test_validate_refuses_what_a_sidecar_refuses_in_its_words(tmp_path, text, said, kind):
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text)
    result = qos_sidecar("validate", "--kind", kind, "--output", "json", str(path))
    assert result.returncode == 2, result.stderr
    (found,) = json.loads(result.stdout)
    assert not found["taken"] and found["kind"] == kind
    assert found["refused"] == refusal_by_the_sidecar(path, kind)
    assert said in found["refused"]


def test_validate_takes_good_files_telling_their_kind_by_content(tmp_path):
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "tenants:\n  pay: {tier: p0, api_keys: [k-pay, k-pay-2]}\n  ops: {tier: p1}\n"
    )
    result = qos_sidecar("validate", str(tenants), *map(str, SHIPPED_CONFIGURATIONS))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{tenants}: a tenants file, taken: 2 tenants, 2 API keys"
    assert lines[1:] == [f"{p}: a configuration file, taken" for p in SHIPPED_CONFIGURATIONS]
    # One bad file among good ones: 2, and the good ones still said taken.
    bad = tmp_path / "qos.yaml"
    bad.write_text("fleet: {cores: 2}\n")
    mixed = qos_sidecar("validate", str(tenants), str(bad))
    assert mixed.returncode == 2 and "taken" in mixed.stdout.splitlines()[0]
    assert "fleet.cores: unknown key" in mixed.stdout


def schema_of(kind: str) -> dict:
    result = qos_sidecar("schema", "--kind", kind)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def documented_tenants_file() -> dict:
    text = (REPO / "docs" / "configuration.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "tenants:" in b]
    return yaml.safe_load(block)


def test_the_schemas_take_the_shipped_files_and_refuse_bad_ones():
    config = schema_of("config")
    jsonschema.Draft202012Validator.check_schema(config)
    assert SHIPPED_CONFIGURATIONS
    for path in SHIPPED_CONFIGURATIONS:
        jsonschema.validate(yaml.safe_load(path.read_text()), config)
    for text, _ in BAD_CONFIGURATIONS[:2]:  # the third is no YAML at all
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(yaml.safe_load(text), config)
    tenants = schema_of("tenants")
    jsonschema.Draft202012Validator.check_schema(tenants)
    jsonschema.validate(documented_tenants_file(), tenants)
    for text, _ in BAD_TENANTS:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(yaml.safe_load(text), tenants)
