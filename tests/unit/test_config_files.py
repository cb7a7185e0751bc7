"""Configuration files read: whole or refused, naming the file and each key. Pure."""

from __future__ import annotations

import pytest

from sidecar.config.audit import MAX_CHANGES
from sidecar.config.base import Tier
from sidecar.config.declared import HeldTenants, plan, revoked, tenants_entry
from sidecar.config.file_reader import read_apart
from sidecar.config.files import Declared, FileRefused, Read, read_config, read_tenants
from sidecar.config.operator_state import Tenant
from sidecar.config.snapshot import Snapshot, hash_api_key
from tests.unit.bad_files import (
    BAD_CONFIGURATIONS,
    BAD_TENANTS,
    TENANTS_NOT_WHOLE,
    TENANTS_NOT_WHOLE_IDS,
)


def test_a_configuration_file_takes_defaults_for_what_it_leaves_out(tmp_path):
    path = tmp_path / "qos.yaml"
    path.write_text("fleet: {max_concurrency: 7}\n")
    read = read_config(path)
    assert read.declared.fleet.max_concurrency == 7
    assert read.declared.tiers.p0.share == 0.6  # the default
    path.write_text('{"fleet": {"max_concurrency": 7}}')  # JSON is YAML too
    assert read_config(path).declared == read.declared  # the same document


@pytest.mark.parametrize(("text", "named"), BAD_CONFIGURATIONS)
def test_a_bad_configuration_file_is_refused_naming_it_and_the_key(tmp_path, text, named):
    path = tmp_path / "qos.yaml"
    path.write_text(text)
    with pytest.raises(FileRefused) as refused:
        read_config(path)
    assert str(path) in str(refused.value) and named in str(refused.value)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(FileRefused, match=r"qos\.yaml"):
        read_config(tmp_path / "qos.yaml")


def test_tenants_keep_only_their_keys_hashes(tmp_path):
    path = tmp_path / "tenants.yaml"
    digest = hash_api_key("k-care")
    path.write_text(
        "tenants:\n"
        "  pay: {tier: p0, api_keys: [k-pay]}\n"
        f"  care: {{tier: p1, api_keys: ['sha256:{digest}'], weight: 2}}\n"
    )
    tenants = read_tenants(path).declared.tenants
    assert tenants["pay"].digests == {hash_api_key("k-pay")}
    assert tenants["care"].digests == {digest}
    assert tenants["care"].record.weight == 2
    assert "api_keys" not in tenants["care"].record.model_dump()


@pytest.mark.parametrize(("text", "named"), BAD_TENANTS)
def test_a_bad_tenants_file_is_refused_whole(tmp_path, text, named):
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    with pytest.raises(FileRefused) as refused:
        read_tenants(path)
    assert named in str(refused.value)


@pytest.mark.parametrize(("text", "said"), TENANTS_NOT_WHOLE, ids=TENANTS_NOT_WHOLE_IDS)
def test_a_tenants_file_not_whole_is_refused(tmp_path, text, said):
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    with pytest.raises(FileRefused) as refused:
        read_tenants(path)
    assert said in str(refused.value)


def test_no_tenants_and_every_default_are_said_outright(tmp_path):
    tenants, config = tmp_path / "tenants.yaml", tmp_path / "qos.yaml"
    tenants.write_text("tenants: {}\nmax_revoked_share: 1\n")
    assert read_tenants(tenants).declared.tenants == {}
    config.write_text("")
    with pytest.raises(FileRefused, match="holds nothing"):
        read_config(config)
    config.write_text("{}")
    assert read_config(config).declared.fleet.max_concurrency > 0


def test_a_file_deeper_than_python_can_build_is_refused_not_a_crash(tmp_path):
    path = tmp_path / "qos.yaml"
    path.write_text("fleet: " + "{a: " * 20_000 + "1" + "}" * 20_000)
    with pytest.raises(FileRefused, match="nested deeper than"):
        read_config(path)


def test_what_a_tenants_file_would_revoke_is_counted_against_what_it_declared():
    held = Snapshot(
        3,
        tenants={name: Tenant(tier=Tier.P1) for name in "abcd"},
        store_id="s",
        declared_tenants={name: "/t.yaml" for name in "abcd"},
    )

    def keeping(*names: str) -> dict[str, Declared]:
        return {name: Declared(Tenant(tier=Tier.P1), frozenset()) for name in names}

    assert not revoked(held, keeping("a", "b", "c", "d"), "/t.yaml").beyond(0.5)
    assert not revoked(held, keeping("a", "b", "c"), "/t.yaml").beyond(0)  # only one
    half = revoked(held, keeping("a", "b"), "/t.yaml")
    assert (half.tenants, half.before) == (2, 4)
    assert not half.beyond(0.5) and half.beyond(0.4)
    assert revoked(held, keeping("a"), "/t.yaml").beyond(0.5)
    assert not revoked(held, keeping(), "/other.yaml").beyond(0)  # not that file's


@pytest.mark.asyncio
async def test_a_file_is_read_and_planned_by_a_process_of_its_own(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  pay: {tier: p0, api_keys: [k-pay]}\n")
    held = Snapshot(4, store_id="s")
    found = await read_apart("tenants", path, HeldTenants.of(held))
    assert isinstance(found, Read) and not found.declared.in_force
    planned = plan(held, read_tenants(path).declared, str(path))
    assert (found.declared.tenants, found.declared.revoked) == (planned.tenants, planned.revoked)
    path.write_text("")
    refused = await read_apart("tenants", path, HeldTenants.of(held))
    assert isinstance(refused, FileRefused) and "holds nothing" in str(refused)
    config = tmp_path / "qos.yaml"
    config.write_text("fleet: {max_concurrency: 7}\n")
    read = await read_apart("config", config)
    assert isinstance(read, Read) and read.declared.fleet.max_concurrency == 7


def test_a_large_change_is_recorded_within_what_a_record_keeps():
    held = Snapshot(2, tenants={}, store_id="s")
    declared = {f"t{i:04d}": Declared(Tenant(tier=Tier.P1), frozenset()) for i in range(500)}
    entry = tenants_entry(held, declared, "/t.yaml")
    assert len(entry.changes) == MAX_CHANGES
    assert entry.changes[-1].new.endswith("more tenants")
    assert tenants_entry(held, {}, "/t.yaml").changes == ()
