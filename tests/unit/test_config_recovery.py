"""When a store counts as lost to the sidecar that holds a configuration. Pure."""

from __future__ import annotations

import pytest

from sidecar.config.recovery import StoreState, lost
from sidecar.config.snapshot import Snapshot

OLD, NEW = "1764000000000-aaaa", "1764000500000-bbbb"
HELD = Snapshot(12, store_id=OLD)


@pytest.mark.parametrize(
    ("state", "is_lost"),
    [
        (StoreState(12, OLD, True), False),  # what it holds
        (StoreState(13, OLD, True), False),  # a later change: loaded, not put back
        (StoreState(0, "", False), True),  # Redis restarted empty
        (StoreState(12, OLD, False), True),  # its document gone
        (StoreState(12, "", True), True),  # its identity gone
        (StoreState(9, OLD, True), True),  # rolled back: a lagging replica, an old backup
        (StoreState(1, NEW, True), True),  # made anew over the lost one
        (StoreState(30, NEW, True), True),  # however far the new one has gone
    ],
)
def test_a_store_is_lost_when_it_no_longer_holds_what_was_read_from_it(state, is_lost):
    assert lost(HELD, state) is is_lost


def test_a_store_older_than_the_one_held_is_the_one_the_fleet_kept():
    older = "1763000000000-cccc"
    assert not lost(HELD, StoreState(3, older, True))  # loaded: the others put it back


def test_nothing_held_is_nothing_to_put_back():
    assert not lost(Snapshot(0), StoreState(0, "", False))
    assert not lost(Snapshot(5), StoreState(0, "", False))  # nor one of no known store
