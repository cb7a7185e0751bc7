"""What a sidecar keeps on its own disk: the last known good configuration (whole or
refused) and the mode as Envoy's disk runtime layer; and the writer that keeps each
current off the event loop."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os

import pytest

from sidecar.config import envoy_layer, local_copy
from sidecar.config.base import Tier
from sidecar.config.disk_writer import LatestOnDisk
from sidecar.config.operator_state import Mode, OperatorMode, Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.config.state_dir import StateDir, default_dir

HELD = Snapshot(
    7,
    QosConfig.from_partial({"fleet": {"capacity_tokens_per_second": 4321}}),
    {"pay": Tenant(tier=Tier.P0, rate_tokens_per_second=50), "bulk": Tenant(tier=Tier.P2)},
    OperatorMode(mode=Mode.CORE_ONLY, force_shed=frozenset({Tier.P2})),
    {"default": {Tier.P0: 0.6, Tier.P1: 0.3, Tier.P2: 0.1}},
    store_id="0001733500000000-abcd1234",
    api_keys={"a" * 64: "pay", "b" * 64: "bulk"},
    declared_config="/etc/qos/qos.yaml",
    declared_tenants={"bulk": "/etc/qos-tenants/tenants.yaml"},
    audit=('{"what": "mode core-only"}',),
    moves=('{"reason": "p0 late"}',),
)


def same(a: Snapshot, b: Snapshot) -> bool:
    return (a, a.audit, a.moves) == (b, b.audit, b.moves)


def test_a_copy_reads_back_as_the_snapshot_written(tmp_path):
    path = StateDir(tmp_path).configuration_copy("redis://:secret@redis:6379/0")
    local_copy.write(path, HELD, "redis://:***@redis:6379/0")
    assert same(local_copy.read(path), HELD)
    assert path.stat().st_mode & 0o777 == 0o600  # the keys' digests are its owner's alone
    assert "secret" not in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left


def test_no_copy_is_none(tmp_path):
    assert local_copy.read(tmp_path / "none.json") is None


def signed(header: str, body: str) -> str:
    """`body` under `header` with its own SHA-256: whole as a file, not as a copy."""
    digest = hashlib.sha256(body.encode()).hexdigest()
    return json.dumps({**json.loads(header), "sha256": digest}) + "\n" + body


@pytest.mark.parametrize(
    "spoil",
    [
        lambda text: "",  # emptied
        lambda text: text[: len(text) // 2],  # cut short
        lambda text: text.replace('"core-only"', '"normal"'),  # changed behind its digest
        lambda text: text.replace('"format": 2', '"format": 99'),
        lambda text: text.split("\n")[0] + "\n{}",  # another body
        lambda text: signed(text.split("\n")[0], '{"version": 7}'),  # whole but partial
    ],
    ids=["empty", "half", "changed", "format", "body", "partial"],
)
def test_a_copy_not_whole_is_refused(tmp_path, spoil):
    path = tmp_path / "copy.json"
    local_copy.write(path, HELD, "redis://redis:6379/0")
    path.write_text(spoil(path.read_text()))
    with pytest.raises(local_copy.CopyRefused):
        local_copy.read(path)


def test_a_copy_names_its_redis_so_another_redis_never_takes_it(tmp_path):
    state = StateDir(tmp_path)
    one = state.configuration_copy("redis://:secret@10.0.0.1:6379/0")
    assert one == state.configuration_copy("redis://:rotated@10.0.0.1:6379/0")  # same Redis
    assert one != state.configuration_copy("redis://10.0.0.2:6379/0")
    assert one != state.configuration_copy("redis://10.0.0.1:6379/1")


def test_the_default_state_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("QOS_STATE_DIR", str(tmp_path / "here"))
    assert default_dir() == tmp_path / "here"
    monkeypatch.delenv("QOS_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_dir() == tmp_path / "xdg" / "qos-sidecar"


def test_envoys_layer_is_swapped_whole_and_read_through_a_relative_link(tmp_path):
    state = StateDir(tmp_path / "state")
    state.make()
    envoy_layer.write(state, OperatorMode(mode=Mode.CORE_ONLY))
    assert envoy_layer.read(state) == {"qos.core_only": "100", "qos.mode": "core-only"}
    assert not os.path.isabs(os.readlink(state.envoy_link))
    envoy_layer.write(state, OperatorMode())
    assert envoy_layer.read(state) == {"qos.core_only": "0", "qos.mode": "normal"}
    # Mounted elsewhere (Envoy's container), the link still resolves.
    moved = tmp_path / "mounted-elsewhere"
    state.path.rename(moved)
    assert envoy_layer.read(StateDir(moved))["qos.core_only"] == "0"
    leftovers = [p.name for p in moved.iterdir() if p.name.startswith(".")]
    assert leftovers == []


@pytest.mark.asyncio
async def test_the_writer_writes_the_newest_and_retries_a_failed_write(tmp_path):
    written: list[int] = []
    failing = {"times": 1}

    def write(value: int) -> None:
        if failing["times"]:
            failing["times"] -= 1
            raise OSError(28, "No space left on device")
        written.append(value)

    writer: LatestOnDisk[int] = LatestOnDisk(write, "a test file")
    for value in (1, 2, 3):  # before it runs: folded into the newest
        writer.submit(value)
    await writer.start()
    try:
        await asyncio.wait_for(writer.caught_up.wait(), 5)  # it retries after a second
    finally:
        await writer.stop()
    assert written == [3] and writer.failures == 1
