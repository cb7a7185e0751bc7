"""Sidecars' in-flight counts shared through Redis, in all and per model pool."""

from __future__ import annotations

import pytest

from sidecar.request.queueing.peers import PeerRegistry

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_each_sidecar_sees_its_peers_counts_in_all_and_per_pool(aredis):
    one, two, three = (PeerRegistry(aredis, name) for name in ("one", "two", "three"))
    await one.heartbeat({"default": 3, "chat": 2})
    await two.heartbeat({"chat": 5, "shop": 0})
    await three.heartbeat({})
    assert (three.others_in_flight, three.peers) == (10, 2)
    assert three.others_in_pool == {"default": 3, "chat": 7}
    await one.heartbeat({"default": 1})
    assert (one.others_in_flight, one.peers) == (5, 2)  # not its own
    assert one.others_in_pool == {"chat": 5}


async def test_a_silent_sidecar_stops_counting_after_its_ttl(aredis):
    gone, alive = PeerRegistry(aredis, "gone"), PeerRegistry(aredis, "alive")
    await gone.heartbeat({"chat": 4}, ttl_seconds=0)  # stale at once
    await alive.heartbeat({})
    assert (alive.others_in_flight, alive.others_in_pool) == (0, {})


async def test_each_tier_s_in_flight_and_waiting_add_up_beside_the_pools(aredis):
    one, two, three = (PeerRegistry(aredis, name) for name in ("one", "two", "three"))
    await one.heartbeat({"default": 3}, 1.0, {"p0": 2, "p2": 1}, {"p2": 4})
    await two.heartbeat({"default": 2}, 1.0, {"p0": 2}, {"p1": 1, "p2": 1})
    await three.heartbeat({})
    assert three.others_in_pool == {"default": 5}  # the tiers' counts are not pools
    assert three.others_in_tier == {"p0": 4, "p2": 1}
    assert three.others_waiting == {"p1": 1, "p2": 5}
    assert three.others_in_flight == 5  # slots are counted once, by pool


async def test_slots_held_add_up_by_pool_and_tier(aredis):
    one, two, three = (PeerRegistry(aredis, name) for name in ("one", "two", "three"))
    await one.heartbeat({"chat": 3, "code:v2": 1}, held={("chat", "p1"): 3, ("code:v2", "p0"): 1})
    await two.heartbeat({"chat": 2}, held={("chat", "p1"): 1, ("chat", "p2"): 1})
    await three.heartbeat({})
    assert three.others_held == {("chat", "p1"): 4, ("chat", "p2"): 1, ("code:v2", "p0"): 1}
    assert three.others_in_pool == {"chat": 5, "code:v2": 1}  # held counts are not pools
    assert three.others_in_tier == {}
