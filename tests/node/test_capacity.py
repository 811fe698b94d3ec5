"""Resource exhaustion is refused up front (issue 13): a node short of disk, LMDB map or segment slots refuses
new writes and new replicas with STORAGE_FULL naming what is short, keeps serving reads, and never fails while
applying a controller command that asks it to store more than it can.

Free disk space comes from a fake source here (``Store.disk_free``); the store, its slots and its map are real.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft import controller as ctl
from multiraft.config.node import NodeConfig
from multiraft.errors import InsufficientStorageError
from multiraft.node.cluster.directory import Directory
from multiraft.node.peer.messages import decode_capacity, encode_capacity
from multiraft.node.replicas.capacity import UNREPORTED, LowWater, RoomLedger, shortage
from multiraft.node.replicas.controller import ControllerMachine
from multiraft.node.scheduler.scheduler import Scheduler
from multiraft.node.scheduler.store import Store
from multiraft.node.scheduler.term_guard import TermGuard
from multiraft.node.services import DataService
from multiraft.node.threads import LoopHandoff, ThreadOwner
from multiraft.node.vocabulary.capacity import NodeCapacity
from storage import LogStore, StorageConfig, StoreCapacity
from tests.controller._helpers import active, cluster, create_topic
from tests.node._fakes import FakeController, FakeLog, FakeStore, cluster_with_topic, directory, lead
from tests.node.test_services import LIMITS, batch

MiB = 1 << 20
LOW = LowWater(min_free_disk_bytes=100 * MiB, min_free_map_bytes=10 * MiB, min_free_segments=4)


def capacity(*, disk: int = 1 << 40, map_used: int = 0, free_segments: int = 100) -> StoreCapacity:
    return StoreCapacity(free_segments, 200, map_used, 1 << 30, disk)


# ------------------------------------------------------------------------------------------- low-water marks


def test_a_store_above_every_low_water_mark_is_short_of_nothing() -> None:
    assert shortage(capacity(), LOW, "/data") == ""


@pytest.mark.parametrize(
    ("store", "named"),
    [
        (capacity(disk=99 * MiB), ["disk", "/data", str(99 * MiB), "min_free_disk_bytes"]),
        (capacity(map_used=(1 << 30) - 9 * MiB), ["LMDB map", str(9 * MiB), "min_free_map_bytes"]),
        (capacity(free_segments=3), ["segments", "3 of max_segments 200", "min_free_segments"]),
    ],
    ids=["disk", "map", "segments"],
)
def test_each_low_water_mark_names_the_resource_what_is_free_and_the_key(
    store: StoreCapacity, named: list[str]
) -> None:
    short = shortage(store, LOW, "/data")
    for part in named:
        assert part in short


def test_taking_a_slot_for_a_new_replica_counts_against_the_segment_reserve() -> None:
    assert shortage(capacity(free_segments=5), LOW, "/data", new_segments=1) == ""
    assert "segments" in shortage(capacity(free_segments=4), LOW, "/data", new_segments=1)


# ------------------------------------------------------------------------------------ produce refused, reads go on


def test_a_short_node_refuses_produce_naming_what_is_short_keeps_serving_fetch_and_resumes_when_there_is_room() -> None:
    async def scenario() -> None:
        short = ["disk: 5 bytes free in /data, below min_free_disk_bytes 100"]
        found = directory(cluster_with_topic())
        store = FakeStore()
        service = DataService(LIMITS, found, found, store, FakeController(), storage_short=lambda: short[0])
        lead(found, "orders", 0, high_watermark=1, log=FakeLog(data=batch(b"old")))

        with pytest.raises(InsufficientStorageError, match="disk: 5 bytes free in /data") as caught:
            await service.produce("orders", 0, batch(b"new"), 0)
        assert caught.value.reason == "STORAGE_FULL" and caught.value.code.name == "RESOURCE_EXHAUSTED"
        assert caught.value.metadata["resource"] == "disk"
        assert not caught.value.retriable, "waiting out a deadline would only hide the cause"
        assert store.produced == [], "a refused batch never reaches the store"
        fetched = await service.fetch("orders", 0, 0, 1 << 20, 0)
        assert fetched.batches == batch(b"old")

        short[0] = ""
        ack = await service.produce("orders", 0, batch(b"new"), 0)
        assert ack.base_offset == 0 and len(store.produced) == 1

    asyncio.run(scenario())


# ----------------------------------------------------------------------------------------- reports and room


@given(
    st.builds(
        NodeCapacity,
        st.integers(1, 2**31 - 1),
        st.integers(0, 2**40),
        st.integers(0, 2**40),
        st.integers(0, 2**20),
        st.integers(0, 2**62),
        st.integers(0, 2**62),
        st.text(max_size=50),
        st.lists(st.integers(0, 2**40), max_size=20).map(tuple),
    )
)
def test_a_capacity_report_survives_the_peer_encoding(report: NodeCapacity) -> None:
    assert decode_capacity(encode_capacity(report)) == report


def report(node_id: int, *, free: int, assigned: int = 0, short: str = "", unstorable: tuple[int, ...] = ()) -> Any:
    return NodeCapacity(node_id, assigned, free, LOW.min_free_segments, 1 << 40, 1 << 40, short, unstorable)


def test_room_counts_replicas_placed_since_the_report_those_proposed_and_those_waiting_for_room() -> None:
    assert report(1, free=10).room(0, 0).replicas == 6
    assert report(1, free=10, assigned=2).room(5, 0).replicas == 3, "3 assigned since the report"
    assert report(1, free=10).room(0, 2).replicas == 4, "2 proposed, not applied yet"
    assert report(1, free=10, unstorable=(7,)).room(0, 0).replicas == 5
    assert report(1, free=3).room(0, 0).replicas == 0
    full = report(1, free=100, short="disk: 1 bytes free").room(0, 0)
    assert (full.replicas, full.reason) == (0, "disk: 1 bytes free")


def test_a_topic_that_does_not_fit_is_refused_whole_naming_each_short_node() -> None:
    state = cluster(3)
    reports = {1: report(1, free=5), 2: report(2, free=4), 3: report(3, free=50, short="disk: 7 bytes free in /d3")}
    ledger = RoomLedger(lambda: reports)
    with pytest.raises(ctl.NotEnoughStorageError) as caught:
        ctl.place_new_topic(active(state), state, 1, 3, ledger.room(state, (1, 2, 3)))
    message = str(caught.value)
    assert caught.value.reason == "STORAGE_FULL" and caught.value.status == "RESOURCE_EXHAUSTED"
    assert "1 partition(s) x 3 replica(s)" in message
    assert "node 2: segments: room for 0 more replica(s)" in message
    assert "node 3: disk: 7 bytes free in /d3" in message
    # what fits is placed: a replication factor of 1 on the nodes with room
    placed = ctl.place_new_topic(active(state), state, 1, 1, ledger.room(state, (1, 2, 3)))
    assert placed == [((1,), 1)]


def test_no_replica_goes_to_a_node_that_has_not_reported_and_a_topic_that_needs_it_waits() -> None:
    state = cluster(3)
    ledger = RoomLedger(lambda: {1: report(1, free=50), 2: report(2, free=50)})
    assert ledger.room(state, (1, 2, 3))[3] == ctl.NodeRoom(0, UNREPORTED)
    placed = ledger.place_new_topic(list(active(state)), state, 4, 2)
    assert {n for replicas, _ in placed for n in replicas} == {1, 2}
    with pytest.raises(ctl.CapacityUnknownError, match=r"\[3\]") as caught:
        ledger.place_new_topic(list(active(state)), state, 1, 3)
    assert caught.value.reason == "UNAVAILABLE", "retriable: the report comes within a second"


def test_a_tight_fit_is_found_when_the_balanced_order_would_run_out_of_room() -> None:
    state = cluster(3)
    room = {1: ctl.NodeRoom(1), 2: ctl.NodeRoom(1), 3: ctl.NodeRoom(2)}
    placed = ctl.place_new_topic(active(state), state, 2, 2, room)
    used = [n for replicas, _ in placed for n in replicas]
    assert sorted(used) == [1, 2, 3, 3]


def test_the_ledger_counts_a_proposed_topic_until_it_is_applied() -> None:
    state = cluster(3)
    ledger = RoomLedger(lambda: {n: report(n, free=6) for n in (1, 2, 3)})
    command = ctl.CreateTopic("t", {}, (((1, 2, 3), 1),))
    ledger.reserve(state.applied_index + 1, command, state.applied_index)
    assert {n: r.replicas for n, r in ledger.room(state, (1, 2, 3)).items()} == {1: 1, 2: 1, 3: 1}
    applied = create_topic(state, "t", 1, 3)  # applied: counted as assigned now, not as proposed
    assert {n: r.replicas for n, r in ledger.room(applied, (1, 2, 3)).items()} == {1: 1, 2: 1, 3: 1}


# -------------------------------------------------------------------- applying what the node cannot store


class _Posts:
    """The loop hand-off of a store with no loop: what it posts runs at once."""

    def post(self, work: Callable[[], None]) -> None:
        work()


def _store(tmp_path: Path, *, max_segments: int, disk_free: int = 1 << 40) -> Store:
    config = NodeConfig(
        node_id=1,
        data_dir=str(tmp_path),
        max_segments=max_segments,
        min_free_segments=2,
        map_size_bytes=64 * MiB,
        min_free_map_bytes=1 * MiB,
    ).validate()
    scheduler = Scheduler(store_opener=lambda: cast(LogStore, None), tick_ms=1_000_000, outbox=_NoOutbox())
    scheduler.store = LogStore.open(tmp_path, StorageConfig(max_segments=max_segments, map_size_bytes=64 * MiB))
    found = Directory(1, ThreadOwner("event loop"))
    store = Store(config, scheduler, found, cast(LoopHandoff, _Posts()), lambda: (frozenset({1}), frozenset({1})))
    store.disk_free = lambda: disk_free
    return store


class _NoOutbox:
    def send(self, batches: Any) -> None:
        pass


def test_a_replica_the_node_cannot_store_stays_offline_and_reported_and_opens_once_there_is_room(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path, max_segments=16)
    logs = store.scheduler.store
    assert logs is not None
    ballast = [logs.log("ballast", i) for i in range(9)]  # 9 of 16 slots: 7 free, 2 kept for rolls
    logs.sync()
    state = create_topic(cluster(3), "orders", 8, 3)
    created = {p.group_id for p in state.groups().values()}

    store.controller = cast(ControllerMachine, SimpleNamespace(state=state))
    store._on_cluster_state(state, created, set())  # a controller command the node cannot fully store

    opened = set(store.scheduler.groups)
    assert len(opened) == 5, "5 new logs fit above the reserve of 2 slots"
    assert set(store.unstorable) == created - opened
    report = store.capacity()
    assert report.unstorable == tuple(sorted(created - opened)) and report.assigned == 8
    assert report.free_segments == 2 and report.short == "", "at its reserve, not below: existing replicas may roll"

    logs.delete_log("ballast", 0)
    for i in range(1, 4):
        logs.delete_log("ballast", i)
    logs.sync()
    store.housekeeping(None)
    assert set(store.scheduler.groups) == created and store.unstorable == {}
    assert len(ballast) == 9
    logs.close()


def test_a_short_disk_is_named_in_the_report_with_the_data_dir(tmp_path: Path) -> None:
    store = _store(tmp_path, max_segments=64, disk_free=10)
    report = store.capacity()
    assert report.short == (
        f"disk: 10 bytes free in {tmp_path}, below min_free_disk_bytes {NodeConfig().min_free_disk_bytes}"
    )
    assert report.disk_free_bytes == 10
    assert store.scheduler.store is not None
    store.scheduler.store.close()


def test_a_replica_placed_again_while_the_disk_is_too_full_to_reclaim_it_stays_offline_and_the_node_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 (five-node nemesis, disk-full): the term guard's file could not be written when a controller
    command placed a released replica here again, and the scheduler stopped on the error."""
    store = _store(tmp_path, max_segments=64)
    scheduler = store.scheduler
    (tmp_path / "terms").mkdir()
    scheduler.term_guard = TermGuard.open(tmp_path / "terms", scheduler.owner)
    state = create_topic(cluster(3), "orders", 1, 3)
    group_id = next(iter(state.groups()))
    scheduler.term_guard.release(group_id)  # this node gave the replica up after its removal applied

    def no_room(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_room)
    store.controller = cast(ControllerMachine, SimpleNamespace(state=state))
    store._on_cluster_state(state, set(), set())  # placed here again: no exception reaches the scheduler

    assert group_id not in scheduler.groups and "no room to record Raft terms" in store.unstorable[group_id][0]
    monkeypatch.undo()
    store.housekeeping(None)  # room again: it opens, as a new replica, and the mark is gone
    assert group_id in scheduler.groups and not scheduler.term_guard.released(group_id)
    assert scheduler.store is not None
    scheduler.store.close()
