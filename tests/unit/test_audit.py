"""The record of changes: what it keeps of a change, and that a key never shows in it."""

from __future__ import annotations

from sidecar.config.audit import (
    MAX_CHANGES,
    MAX_VALUE,
    Actor,
    AuditEntry,
    Changed,
    clean_name,
    controller_entry,
    differences,
)
from sidecar.config.base import Tier
from sidecar.config.declared import tenants_entry
from sidecar.config.files import Declared, DeclaredTenant
from sidecar.config.operator_state import Tenant
from sidecar.config.snapshot import Snapshot, hash_api_key
from sidecar.config.tenants import put_entry, remove_entry

ALICE = Actor("alice", "cli")


def test_differences_are_dotted_fields_old_and_new_as_json():
    old = {"fleet": {"max_concurrency": 8, "capacity": 100}, "routes": {"/a": "chat"}}
    new = {"fleet": {"max_concurrency": 9, "capacity": 100}, "routes": {"/b": "chat"}}
    assert differences(old, new) == (
        Changed("fleet.max_concurrency", "8", "9"),
        Changed("routes./a", '"chat"', None),
        Changed("routes./b", None, '"chat"'),
    )
    assert differences(old, old) == ()


def test_a_record_keeps_the_first_fields_each_cut():
    many = {f"k{i:03}": "x" * (MAX_VALUE * 2) for i in range(MAX_CHANGES + 5)}
    entry = ALICE.entry("config", "configuration set", differences({}, many))
    assert len(entry.changes) == MAX_CHANGES + 1
    assert entry.changes[-1] == Changed("…", None, "5 more fields")
    assert all(len(change.new or "") <= MAX_VALUE for change in entry.changes)


def test_an_entry_reads_back_as_written_and_a_foreign_one_as_none():
    entry = ALICE.entry("mode", "mode core-only", (Changed("mode", '"normal"', '"core-only"'),))
    assert AuditEntry.from_json(entry.to_json()) == entry
    assert AuditEntry.from_json('{"what": "mode normal"}') is None
    assert AuditEntry.from_json("not json") is None
    line = entry.describe()
    assert line.endswith('mode core-only by alice via cli; mode: "normal" -> "core-only"')
    assert line[:20].endswith("Z") and line[10] == "T"  # UTC, ISO 8601


def test_a_tenants_record_says_a_key_came_never_which():
    key = "qsk-secret"
    record = Tenant(tier=Tier.P0).model_dump_json()
    added = put_entry(ALICE, "pay", None, record, hash_api_key(key), None)
    assert added.what == "tenant pay added"
    assert Changed("tier", None, '"p0"') in added.changes
    assert Changed("api key", None, "added") in added.changes
    moved = put_entry(ALICE, "pay", record, record, hash_api_key(key), "shop")
    assert moved.what == "tenant pay changed"
    assert moved.changes == (Changed("api key", None, "moved from tenant shop"),)
    removed = remove_entry(ALICE, "pay", record)
    assert removed.changes[-1] == Changed("api keys", None, "revoked")
    for entry in (added, moved, removed):
        assert key not in entry.to_json() and hash_api_key(key) not in entry.to_json()


def test_a_tenants_file_is_recorded_tenant_by_tenant_with_key_counts():
    held = Snapshot(
        3,
        tenants={"pay": Tenant(tier=Tier.P0), "gone": Tenant(tier=Tier.P2)},
        api_keys={hash_api_key("k1"): "pay"},
        declared_tenants={"pay": "t.yaml", "gone": "t.yaml"},
    )
    file = DeclaredTenant(tier=Tier.P0, api_keys=("k1", "k2"), weight=2)
    declared = {"pay": Declared(file.record(), file.digests())}
    entry = tenants_entry(held, declared, "t.yaml")
    assert (entry.what, entry.by, entry.via) == ("tenants from t.yaml", "file", "file")
    assert Changed("pay.keys", "1", "2") in entry.changes
    assert Changed("pay.weight", "1.0", "2.0") in entry.changes
    assert Changed("gone.tier", '"p2"', None) in entry.changes
    assert "k2" not in entry.to_json() and hash_api_key("k2") not in entry.to_json()


def test_a_controller_move_reads_as_a_record_and_a_broken_one_as_none():
    move = {
        "at": 10.0,
        "reason": "P0 misses its SLO",
        "pool": "chat",
        "shares": {"p0": 0.7, "p1": 0.2, "p2": 0.1},
        "before": {"p0": 0.6, "p1": 0.25, "p2": 0.15},
    }
    entry = controller_entry(move)
    assert entry is not None and (entry.by, entry.via, entry.at) == ("controller", "controller", 10)
    assert entry.what == "shares of pool chat: P0 misses its SLO"
    assert entry.changes[0] == Changed("p0 share", "0.6", "0.7")
    assert controller_entry({"reason": "no shares"}) is None


def test_names_given_are_cleaned():
    assert clean_name("  ann\n\x1b[31m ") == "ann[31m"
    assert clean_name(7) == ""
    assert len(clean_name("x" * 500)) == 64
