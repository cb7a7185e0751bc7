"""What a sidecar holds goes back into a real Redis that lost it, once; no writer starts a
fresh configuration over a lost one."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from sidecar.config.audit import Actor
from sidecar.config.base import Tier
from sidecar.config.declared import StoreMoved, plan, write_tenants
from sidecar.config.files import read_tenants
from sidecar.config.operator_state import Mode, OperatorMode, Tenant
from sidecar.config.recovery import check, partly_lost, put_back, read_state, record
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import hash_api_key
from sidecar.config.store import (
    API_KEYS_KEY,
    DOC_KEY,
    MODE_KEY,
    TENANTS_KEY,
    VERSION_KEY,
    ConfigStore,
    StoreLost,
    StorePartlyLost,
    tenant_keys_key,
)
from sidecar.config.watcher import ConfigWatcher
from sidecar.operator.commands.common import configuration_in_place
from sidecar.request.queueing.peers import PEERS_KEY

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def configured(store: ConfigStore):
    """A store an operator configured, and the snapshot a sidecar holds of it."""
    await store.save_config(QosConfig.from_partial({"fleet": {"max_concurrency": 7}}))
    await store.put_tenant("pay", Tenant(tier=Tier.P0), "k-pay")
    await store.put_tenant("bulk", Tenant(tier=Tier.P2, rate_tokens_per_second=50), "k-bulk")
    await store.save_mode(OperatorMode(mode=Mode.CORE_ONLY), actor=Actor("duty", "cli"))
    await store.save_shares({Tier.P0: 0.7, Tier.P1: 0.25, Tier.P2: 0.05}, "test")
    return await store.load()


async def test_an_emptied_redis_gets_back_all_a_sidecar_held_written_once(aredis):
    store = ConfigStore(aredis)
    held = await configured(store)
    await aredis.flushall()

    assert await put_back(aredis, held)
    assert not await put_back(aredis, held)  # the next sidecar finds it back
    back = await store.load()
    assert back.version == held.version and back.store_id == held.store_id
    assert back.config.fleet.max_concurrency == 7 and back.mode.mode is Mode.CORE_ONLY
    assert back.tenants == held.tenants and back.shares == held.shares
    # The record of changes too, under one saying it was put back.
    assert back.audit[1:] == held.audit and len(held.audit) == 4
    assert back.moves == held.moves and len(held.moves) == 1
    (entry,) = await store.audit(1)
    assert entry.kind == "put-back" and entry.via == "python"
    assert back.api_keys == {hash_api_key("k-pay"): "pay", hash_api_key("k-bulk"): "bulk"}
    assert await store.key_count("pay") == 1  # its key set too: removing it revokes the key
    assert await store.remove_tenant("pay")
    assert await aredis.hget(API_KEYS_KEY, hash_api_key("k-pay")) is None
    assert not await aredis.exists(tenant_keys_key("pay"))


async def test_no_writer_that_read_a_store_writes_into_an_emptied_one(aredis):
    store = ConfigStore(aredis)
    held = await configured(store)
    await aredis.flushall()
    with pytest.raises(StoreLost):  # the SLO controller's move
        await store.save_shares(
            {Tier.P0: 0.8, Tier.P1: 0.15, Tier.P2: 0.05}, "x", held=held.store_id
        )
    with pytest.raises(StoreLost):  # a switch from the dashboard
        await store.save_mode(OperatorMode(), held.store_id, actor=Actor("x", "dashboard"))
    with pytest.raises(StoreLost):
        await store.put_tenant_reporting("new", Tenant(tier=Tier.P1), held=held.store_id)
    assert await aredis.dbsize() == 0  # not a fresh document, not a version


async def test_the_latest_version_held_wins_and_a_store_made_anew_is_replaced(aredis):
    store = ConfigStore(aredis)
    earlier = await configured(store)
    await store.put_tenant("late", Tenant(tier=Tier.P1), "k-late")
    later = await store.load()
    await aredis.flushall()
    # A command that held nothing made the empty Redis a new store meanwhile.
    await ConfigStore(aredis).put_tenant("stray", Tenant(tier=Tier.P2))
    assert (await read_state(aredis)).identity > later.store_id

    assert await put_back(aredis, earlier)  # a sidecar that had not seen the last change
    assert await put_back(aredis, later)  # one that had: the store is behind it
    assert not await put_back(aredis, earlier)
    back = await store.load()
    assert back.version == later.version and "late" in back.tenants
    assert "stray" not in back.tenants


async def test_a_watcher_puts_back_what_it_holds_and_follows_what_is_put_back(aredis):
    store = ConfigStore(aredis)
    first, second = ConfigWatcher(aredis), ConfigWatcher(aredis)
    await first.refresh()  # an empty Redis, nothing held: made a new store
    assert (await read_state(aredis)).identity == first.current.store_id != ""
    held = await configured(store)
    await first.refresh()
    await second.refresh()
    put_backs = []
    first.on_put_back(put_backs.append)
    second.on_put_back(put_backs.append)
    await aredis.flushall()
    await first.refresh()
    await second.refresh()
    assert [snapshot.version for snapshot in put_backs] == [held.version]  # once
    assert second.current == first.current and first.current.mode.mode is Mode.CORE_ONLY
    assert await aredis.exists(DOC_KEY)


async def test_a_command_waits_for_the_sidecars_to_put_back_what_redis_lost(aredis, capsys):
    store = ConfigStore(aredis)
    held = await configured(store)
    await aredis.flushall()
    await aredis.hset(PEERS_KEY, "a-sidecar", "0 0")  # sidecars are about

    async def sidecar_puts_back():
        await asyncio.sleep(0.5)
        await put_back(aredis, held)

    putting_back = asyncio.create_task(sidecar_puts_back())
    started = time.monotonic()
    await configuration_in_place(aredis)
    assert time.monotonic() - started >= 0.5
    await putting_back
    assert "waiting for the sidecars" in capsys.readouterr().err
    assert (await store.load()).mode.mode is Mode.CORE_ONLY  # read what was set, not empty


async def test_a_command_on_an_empty_redis_with_no_sidecar_makes_it_a_new_store(aredis, capsys):
    started = time.monotonic()
    await configuration_in_place(aredis)
    assert time.monotonic() - started < 3
    assert capsys.readouterr().err == ""  # nobody to wait for: nothing said
    await ConfigStore(aredis).put_tenant("first", Tenant(tier=Tier.P1))
    state = await read_state(aredis)
    assert state.identity and state.has_document and state.version == 2


async def test_a_part_changed_behind_the_version_is_told_and_put_back_once(aredis):
    """The checksum over what operators set tells a tenant's tier changed by hand (same
    length, same version) and a deleted mode; a put back restores them once, and records
    its checksum so the next sidecar, and the commands, find the store whole."""
    store = ConfigStore(aredis)
    held = await configured(store)
    found = await check(aredis)
    assert found is not None and found.digest == held.digest and found.recorded == ""
    await record(aredis, held)
    found = await check(aredis)
    assert found is not None and found.recorded_for(held.version) == held.digest

    await aredis.hset(TENANTS_KEY, "bulk", Tenant(tier=Tier.P0).model_dump_json())
    await aredis.delete(MODE_KEY)
    found = await check(aredis)
    assert found is not None and found.partial and partly_lost(held, found)
    written = await put_back(aredis, held, found)
    assert written is not None
    assert await put_back(aredis, held, found) is None  # put back already: its record moved
    back = await store.load()
    assert back.tenants["bulk"].tier is Tier.P2 and back.mode.mode is Mode.CORE_ONLY
    assert back.version == held.version and back.digest == written.digest
    after = await check(aredis)
    assert after is not None and not after.partial and not partly_lost(held, after)
    (entry,) = await store.audit(1)
    assert entry.kind == "put-back" and entry.changes[0].field == "parts"


async def test_the_controller_writes_no_new_version_over_a_part_lost(aredis):
    """A change bumps the version, where the record of the old one no longer tells a part
    lost: written only into a store found whole, and a part lost while it is written makes
    it look again (every checked part is watched until the write)."""
    store = ConfigStore(aredis)
    held = await configured(store)
    await record(aredis, held)
    shares = {Tier.P0: 0.6, Tier.P1: 0.3, Tier.P2: 0.1}
    await aredis.delete(MODE_KEY)
    with pytest.raises(StorePartlyLost):
        await store.save_shares(shares, "test", held=held.store_id, whole=store.whole)
    assert int(await aredis.get(VERSION_KEY)) == held.version  # nothing written
    written = await put_back(aredis, held, await check(aredis))
    assert written is not None

    looked = 0

    async def lost_while_looking() -> bool:
        """Whole when first looked at; the mode deleted right after, before the write."""
        nonlocal looked
        looked += 1
        answer = await store.whole()
        if looked == 1:
            await aredis.delete(MODE_KEY)
        return answer

    with pytest.raises(StorePartlyLost):
        await store.save_shares(shares, "test", held=held.store_id, whole=lost_while_looking)
    assert looked == 2 and int(await aredis.get(VERSION_KEY)) == written.version
    await put_back(aredis, written, await check(aredis))
    version = await store.save_shares(shares, "test", held=held.store_id, whole=store.whole)
    assert version == written.version + 1  # whole again: written


async def test_a_tenants_file_writes_what_changed_against_the_version_it_was_planned_on(
    aredis, tmp_path
):
    """Only what differs is written, a key another tenant holds moves to the file's, and
    a plan made against an older version writes nothing."""
    store = ConfigStore(aredis)
    await store.put_tenant("cli-made", Tenant(tier=Tier.P2), "k-shared")
    path = tmp_path / "tenants.yaml"
    path.write_text(
        "tenants:\n  pay: {tier: p0, api_keys: [k-pay, k-shared]}\n  care: {tier: p1}\n"
    )
    held = await store.load()
    first = plan(held, read_tenants(path).declared, str(path))
    assert await write_tenants(aredis, first)
    after = await store.load()
    assert after.api_keys[hash_api_key("k-shared")] == "pay"  # moved to the file's tenant
    assert await store.key_count("cli-made") == 0 and await store.key_count("pay") == 2
    assert after.declared_tenants == {"pay": str(path), "care": str(path)}

    path.write_text("tenants:\n  pay: {tier: p0, api_keys: [k-pay, k-shared], weight: 3}\n")
    stale = plan(held, read_tenants(path).declared, str(path))  # on the version before
    with pytest.raises(StoreMoved):
        await write_tenants(aredis, stale)
    assert (await store.load()).version == after.version
    fresh = plan(after, read_tenants(path).declared, str(path))
    change = json.loads(fresh.tenants)
    assert set(change["records"]) == {"pay"} and change["keys"] == {}
    assert change["removed"] == ["care"] and change["owned"] == {}
    assert await write_tenants(aredis, fresh)
    final = await store.load()
    assert set(final.tenants) == {"cli-made", "pay"} and final.tenants["pay"].weight == 3
