"""A follower whose store is full keeps running: the round that does not fit is rolled back and retried, the
follower acknowledges nothing it has not made durable, and it catches up once there is room (issue 13).

A real LogStore fills up for real: its segment slots (``max_segments``) or its LMDB map (``map_size_bytes``).
Node 1 hosts one follower group on the real scheduler thread; the leader (node 2) is played by the test.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from multiraft import raft
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from storage import Entry, EntryKind, LogStore, StorageConfig

NODE, LEADER = 1, 2
MiB = 1 << 20
T = raft.MessageType


def follower_group(store: LogStore, machine: Any) -> RaftGroup:
    """Raft group 1 of voters 1, 2 and 3 on log ``t/0`` of ``store``, as node 1 (a follower until leader 2 speaks)."""
    storage = RaftLogStorage(store.log("t", 0))
    hard_state, snapshot = raft.bootstrap(raft.ConfState.of((1, 2, 3)))
    storage.apply_snapshot(snapshot)
    storage.set_hard_state(hard_state)
    config = raft.RaftConfig(id=NODE, election_tick=10, heartbeat_tick=1)
    raw = raft.RawNode(config, storage, random.Random(1), applied=storage.applied_index())
    return RaftGroup(1, raw, storage, machine)


class Outbox:
    def __init__(self) -> None:
        self.sent: list[raft.Message] = []
        self.lock = threading.Lock()

    def send(self, batches: dict[int, list[tuple[int, raft.Message]]]) -> None:
        with self.lock:
            self.sent += [message for messages in batches.values() for _, message in messages]

    def acked(self) -> int:
        with self.lock:
            return max((m.index for m in self.sent if m.type is T.APP_RESP and not m.reject), default=0)


class Machine:
    def __init__(self) -> None:
        self.applied: list[int] = []

    def apply(self, group: RaftGroup, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        self.applied += [e.index for e in entries]
        return {}

    def on_role_change(self, group: RaftGroup, soft_state: raft.SoftState) -> None:
        pass

    def on_snapshot(self, group: RaftGroup, snapshot: raft.Snapshot) -> None:
        pass


def on_thread(scheduler: Scheduler, work: Callable[[], Any]) -> Any:
    done = threading.Event()
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(work())
        finally:
            done.set()

    scheduler.submit(run)
    assert done.wait(10.0), "the scheduler thread did not run the work"
    return result[0] if result else None


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(100_000):
        if condition():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def append(index: int, payload: bytes, commit: int) -> raft.Message:
    entry = raft.Entry(index, 2, raft.EntryKind.CONTROL, 0, payload)
    log_term = 1 if index == 2 else 2
    return raft.Message(
        type=T.APP, to=NODE, sender=LEADER, term=2, index=index - 1, log_term=log_term, entries=[entry], commit=commit
    )


@pytest.mark.parametrize("resource", ["segments", "map"])
def test_a_follower_that_runs_out_of_storage_keeps_running_acks_nothing_undurable_and_catches_up_with_room(
    tmp_path: Path, resource: str
) -> None:
    # segments: 4 slots, the follower's log holds one; ballast logs take the rest, so its first roll fails.
    # map: 16 MiB (the smallest map) with a 6 MiB ballast entry; 4 MiB entries fill the rest.
    config = StorageConfig(max_segments=4, segment_bytes=1024, map_size_bytes=16 * MiB)
    outbox = Outbox()
    scheduler = Scheduler(store_opener=lambda: LogStore.open(tmp_path, config), tick_ms=3_600_000, outbox=outbox)
    machine = Machine()
    groups: list[RaftGroup] = []

    def load() -> None:
        store = scheduler.store
        assert store is not None
        group = follower_group(store, machine)
        if resource == "segments":
            for i in range(3):
                store.log("ballast", i)
        else:
            ballast = store.log("ballast", 0)
            ballast.append([Entry(1, 1, EntryKind.CONTROL, 0, b"b" * (6 * MiB))])
        store.sync()
        groups.append(group)
        scheduler.add_group(group)

    scheduler.start(load)
    try:
        size = 700 if resource == "segments" else 4 * MiB
        payloads = [bytes([i]) * size for i in range(2, 6)]  # entries 2..5
        for index, payload in enumerate(payloads, start=2):
            message = append(index, payload, commit=index)
            on_thread(scheduler, lambda m=message: scheduler.deliver([(1, m)]))
            wait_until(lambda i=index: scheduler.storage_full != "" or outbox.acked() >= i, f"entry {index}")
            if scheduler.storage_full:
                break
        assert scheduler.storage_full, "the store filled up"
        stuck_at = outbox.acked()
        assert stuck_at < 5
        time.sleep(1.5)  # a retry or more happens meanwhile; none may stop the node or ack what is not durable
        assert scheduler.alive
        assert outbox.acked() == stuck_at
        durable = on_thread(scheduler, groups[0].storage.last_index)
        assert durable == stuck_at, "what was acknowledged is what is durable, nothing more"
        assert machine.applied == list(range(2, stuck_at + 1))

        def make_room() -> None:
            store = scheduler.store
            assert store is not None
            store.delete_log("ballast", 0)
            store.sync()

        on_thread(scheduler, make_room)
        wait_until(lambda: outbox.acked() == stuck_at + 1, "the waiting entry to be written once there is room")
        assert scheduler.storage_full == ""
        for index in range(stuck_at + 2, 6):  # the leader goes on; the follower keeps up
            message = append(index, payloads[index - 2][:100], commit=index)
            on_thread(scheduler, lambda m=message: scheduler.deliver([(1, m)]))
            wait_until(lambda i=index: outbox.acked() >= i, f"entry {index} after the room was made")
        wait_until(lambda: machine.applied[-1:] == [5], "every entry applied")
        assert machine.applied == [2, 3, 4, 5]
        assert scheduler.alive
    finally:
        scheduler.stop()

    with LogStore.open(tmp_path, config) as reopened:
        log = reopened.log("t", 0, create=False)
        assert log.last_index() == 5, "a restart finds every acknowledged entry"


def test_work_between_rounds_that_does_not_fit_is_discarded_and_the_node_goes_on(tmp_path: Path) -> None:
    config = StorageConfig(map_size_bytes=16 * MiB)
    outbox = Outbox()
    scheduler = Scheduler(store_opener=lambda: LogStore.open(tmp_path, config), tick_ms=3_600_000, outbox=outbox)
    machine = Machine()

    def load() -> None:
        store = scheduler.store
        assert store is not None
        storage = RaftLogStorage(store.log("t", 0))
        hard_state, snapshot = raft.bootstrap(raft.ConfState.of((1, 2, 3)))
        storage.apply_snapshot(snapshot)
        storage.set_hard_state(hard_state)
        raft_config = raft.RaftConfig(id=NODE, election_tick=10, heartbeat_tick=1)
        raw = raft.RawNode(raft_config, storage, random.Random(1), applied=storage.applied_index())
        scheduler.add_group(RaftGroup(1, raw, storage, machine))

    scheduler.start(load)
    try:

        def too_big() -> None:  # a checkpoint larger than the whole map, as housekeeping could write
            store = scheduler.store
            assert store is not None
            store.log("t", 0).set_attribute("checkpoint", b"c" * (20 * MiB))

        scheduler.submit(too_big)
        scheduler.every(0.05, too_big)
        message = append(2, b"after", commit=2)
        on_thread(scheduler, lambda: scheduler.deliver([(1, message)]))
        wait_until(lambda: outbox.acked() == 2, "the follower to go on writing")
        wait_until(lambda: machine.applied == [2], "the entry to be applied")
        assert scheduler.alive
        stored = on_thread(scheduler, lambda: scheduler.store.log("t", 0).attribute("checkpoint"))  # type: ignore[union-attr]
        assert stored is None, "the write that did not fit is discarded"
    finally:
        scheduler.stop()
