"""The scheduler's durability contract, checked against a store that only makes writes durable on sync().

Each round the scheduler writes every group's Ready into one transaction, syncs once, and only then sends the
messages whose meaning depends on durable state (append acks, votes) and applies committed entries (which
answers producers). A quiescent group is not ticked. The store here models durability: what a group wrote
becomes durable only when ``sync()`` is called, and every message sent, entry applied and producer answered is
checked against what was durable at that moment.

Groups run on the real scheduler thread; the peers (nodes 2 and 3) are played by the test, which steps
hand-made messages into node 1's groups.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from multiraft import raft
from multiraft.errors import InvalidArgumentError, RecordTooLargeError, StorageFailureError, UnavailableError
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from storage import ENTRY_OVERHEAD_BYTES, CorruptionError, LogStore, StorageConfig, StorageError

NODE = 1
PEER = 2
CANDIDATE = 3
NEVER_MS = 3_600_000  # a tick that never comes during a test
T = raft.MessageType
MUST_FOLLOW_SYNC = frozenset({T.APP_RESP, T.VOTE, T.VOTE_RESP, T.PRE_VOTE_RESP})


@dataclass
class Disk:
    """What each group wrote, and what of it is durable (made so only by ``FakeStore.sync``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    written_index: dict[int, int] = field(default_factory=dict)
    durable_index: dict[int, int] = field(default_factory=dict)
    written_hard: dict[int, raft.HardState] = field(default_factory=dict)
    durable_hard: dict[int, raft.HardState] = field(default_factory=dict)
    unsynced: set[int] = field(default_factory=set)  # groups with entries or term/vote not yet synced

    def record(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    def snapshot_events(self) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.events)

    def forget_history(self) -> None:
        with self.lock:
            self.events.clear()


class FakeStore:
    """Stands in for the LogStore: counts syncs, and on each makes every group's writes durable."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.syncs = 0
        self.rollbacks = 0
        self.writes_pending = False

    def sync(self) -> None:
        disk = self.disk
        with disk.lock:
            disk.events.append(("sync", frozenset(disk.unsynced)))
            disk.durable_index.update(disk.written_index)
            disk.durable_hard.update(disk.written_hard)
            disk.unsynced.clear()
        self.syncs += 1
        self.writes_pending = False

    def rollback(self) -> None:
        self.rollbacks += 1

    def close(self) -> None:
        pass


class RecordingStorage(raft.MemoryStorage):
    """A group's Raft storage whose writes the disk records as written, not yet durable."""

    def __init__(self, group_id: int, disk: Disk, conf_state: raft.ConfState) -> None:
        super().__init__()
        hard_state, snapshot = raft.bootstrap(conf_state)
        super().apply_snapshot(snapshot)
        super().set_hard_state(hard_state)
        self.group_id = group_id
        self.disk = disk
        self.failure: raft.RaftStorageError | None = None  # raised by the next append, as the LMDB adapter would
        disk.written_index[group_id] = disk.durable_index[group_id] = snapshot.meta.index
        disk.written_hard[group_id] = disk.durable_hard[group_id] = hard_state

    def append(self, entries: Sequence[raft.Entry]) -> None:
        if self.failure is not None and entries:
            raise self.failure
        super().append(entries)
        if entries:
            disk = self.disk
            with disk.lock:
                disk.events.append(("write", self.group_id, "entries", entries[-1].index))
                disk.written_index[self.group_id] = entries[-1].index
                disk.unsynced.add(self.group_id)

    def set_hard_state(self, hard_state: raft.HardState) -> None:
        super().set_hard_state(hard_state)
        disk = self.disk
        with disk.lock:
            disk.events.append(("write", self.group_id, "hard_state", hard_state))
            previous = disk.written_hard[self.group_id]
            disk.written_hard[self.group_id] = hard_state
            if (previous.term, previous.vote) != (hard_state.term, hard_state.vote):
                disk.unsynced.add(self.group_id)

    def apply_snapshot(self, snapshot: raft.Snapshot) -> None:
        raise AssertionError("no snapshot is sent in these scenarios")

    def set_applied(self, index: int, conf_state: raft.ConfState | None = None) -> None:
        self.disk.record("write", self.group_id, "applied", index)

    def reload(self) -> None:
        pass


class RecordingOutbox:
    """The network side: records each message and checks that an ack or a vote was durable when it left."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk

    def send(self, batches: dict[int, list[tuple[int, raft.Message]]]) -> None:
        disk = self.disk
        for to, messages in batches.items():
            for group_id, message in messages:
                assert message.to == to
                disk.record("send", group_id, message.type, message)
                if message.type not in MUST_FOLLOW_SYNC:
                    continue
                with disk.lock:
                    durable_index, durable_hard = disk.durable_index[group_id], disk.durable_hard[group_id]
                if message.type is T.APP_RESP and not message.reject and message.index > durable_index:
                    disk.violation(f"group {group_id} acked index {message.index}; durable only to {durable_index}")
                if message.type is T.VOTE_RESP and not message.reject:
                    if (durable_hard.term, durable_hard.vote) != (message.term, message.to):
                        disk.violation(f"group {group_id} granted a vote it had not made durable: {durable_hard}")


class RecordingMachine:
    """A state machine that checks every entry it applies is durable on this node."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.applied: list[int] = []

    def apply(self, group: RaftGroup, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        disk = self.disk
        disk.record("apply", group.group_id, entries[-1].index)
        with disk.lock:
            durable = disk.durable_index[group.group_id]
        if entries[-1].index > durable:
            disk.violation(f"group {group.group_id} applied {entries[-1].index}; durable only to {durable}")
        self.applied += [e.index for e in entries]
        return {e.index: f"result {e.index}" for e in entries}

    def on_role_change(self, group: RaftGroup, soft_state: raft.SoftState) -> None:
        pass

    def on_snapshot(self, group: RaftGroup, snapshot: raft.Snapshot) -> None:
        raise AssertionError("no snapshot is installed in these scenarios")


class CountingRawNode(raft.RawNode):
    """A RawNode that counts the ticks it is given, and those given while it was quiescent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ticks = 0
        self.ticks_while_quiescent = 0

    def tick(self) -> None:
        self.ticks += 1
        if self.quiescent:
            self.ticks_while_quiescent += 1
        super().tick()


@dataclass
class Node1:
    scheduler: Scheduler
    store: FakeStore
    disk: Disk
    groups: list[RaftGroup]

    def on_thread(self, work: Callable[[], None], timeout_s: float = 5.0) -> None:
        """Run ``work`` on the scheduler thread (before its next round) and wait for it to have run."""
        done = threading.Event()

        def run() -> None:
            try:
                work()
            finally:
                done.set()

        self.scheduler.submit(run)
        assert done.wait(timeout_s), "the scheduler thread did not run the work"

    def wait_until(self, condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        for _ in range(100_000):
            if condition():
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        raise AssertionError(f"timed out waiting for {what}; events: {self.disk.snapshot_events()[-20:]}")

    def sent(self, message_type: raft.MessageType) -> list[tuple[Any, ...]]:
        return [e for e in self.disk.snapshot_events() if e[0] == "send" and e[2] is message_type]


@contextmanager
def node1(groups: int, voters: tuple[int, ...], *, tick_ms: int = NEVER_MS, election_tick: int = 10) -> Iterator[Node1]:
    """Node 1 hosting ``groups`` groups of ``voters`` on a running scheduler; stopped on exit."""
    disk = Disk()
    store = FakeStore(disk)
    scheduler = Scheduler(store_opener=lambda: cast(LogStore, store), tick_ms=tick_ms, outbox=RecordingOutbox(disk))
    config = raft.RaftConfig(id=NODE, election_tick=election_tick, heartbeat_tick=1)
    hosted = []
    for group_id in range(1, groups + 1):
        storage = RecordingStorage(group_id, disk, raft.ConfState.of(voters))
        raw = CountingRawNode(config, storage, random.Random(group_id))
        hosted.append(RaftGroup(group_id, raw, cast(RaftLogStorage, storage), RecordingMachine(disk)))
    scheduler.start(lambda: [scheduler.add_group(group) for group in hosted])
    try:
        yield Node1(scheduler, store, disk, hosted)
        assert disk.violations == []
    finally:
        scheduler.stop()


def _append_from_leader(group_id: int, index: int, commit: int) -> tuple[int, raft.Message]:
    """Leader 2 of term 2 appends one entry at ``index`` (after the bootstrap entry) and commits to ``commit``."""
    entry = raft.Entry(index, 2, raft.EntryKind.DATA, 0, b"payload %d" % group_id)
    message = raft.Message(
        type=T.APP, to=NODE, sender=PEER, term=2, index=index - 1, log_term=1, entries=[entry], commit=commit
    )
    return group_id, message


def _vote_request(group_id: int) -> tuple[int, raft.Message]:
    """Candidate 3 asks for a vote in term 5 with a log as long as node 1's (the bootstrap entry)."""
    return group_id, raft.Message(type=T.VOTE, to=NODE, sender=CANDIDATE, term=5, index=1, log_term=1)


def _heartbeat(group_id: int, commit: int, *, quiesce: bool) -> tuple[int, raft.Message]:
    return group_id, raft.Message(type=T.HEARTBEAT, to=NODE, sender=PEER, term=2, commit=commit, quiesce=quiesce)


@pytest.mark.parametrize(
    ("request_kind", "answer"),
    [("append", T.APP_RESP), ("vote", T.VOTE_RESP)],
    ids=["append-acks", "votes"],
)
def test_a_round_of_many_groups_is_synced_once_and_only_then_answered(
    request_kind: str, answer: raft.MessageType
) -> None:
    groups = 8
    with node1(groups, (1, 2, 3)) as node:
        make = (lambda g: _append_from_leader(g, 2, commit=2)) if request_kind == "append" else _vote_request
        node.on_thread(lambda: node.scheduler.deliver([make(g) for g in range(1, groups + 1)]))
        node.wait_until(lambda: len(node.sent(answer)) == groups, f"{groups} answers")
        if request_kind == "append":
            node.wait_until(
                lambda: all(g.machine.applied == [2] for g in node.groups),
                "the committed entries to be applied",
            )

        events = node.disk.snapshot_events()
        syncs = [position for position, e in enumerate(events) if e[0] == "sync"]
        assert node.store.syncs == 1 and len(syncs) == 1, f"one sync for the round of {groups} groups: {events}"
        sync_at = syncs[0]
        assert events[sync_at][1] == frozenset(range(1, groups + 1)), "the one sync covers every group's writes"
        written = {e[1] for e in events[:sync_at] if e[0] == "write" and e[2] in ("entries", "hard_state")}
        assert written == set(range(1, groups + 1))
        answers = [p for p, e in enumerate(events) if e[0] == "send" and e[2] is answer]
        assert min(answers) > sync_at, "an answer left before the sync that makes it true"
        assert all(not e[3].reject for e in events if e[0] == "send" and e[2] is answer)
        applies = [p for p, e in enumerate(events) if e[0] == "apply"]
        if request_kind == "append":
            assert len(applies) == groups and min(applies) > sync_at, "entries applied before they were durable"
        else:
            assert applies == []


def test_producers_are_answered_only_after_the_one_sync_that_made_their_entries_durable() -> None:
    groups = 6
    with node1(groups, (1,)) as node:  # single-voter groups: node 1's own fsync is the commit

        def campaign() -> None:
            for group in node.groups:
                group.raw.campaign()
                node.scheduler.touch(group)

        node.on_thread(campaign)
        node.wait_until(lambda: all(g.is_leader and g.machine.applied for g in node.groups), "leaders")
        node.disk.forget_history()
        syncs_before = node.store.syncs
        acks: list[tuple[int, int, Any, BaseException | None]] = []

        def propose_everywhere() -> None:
            for group in node.groups:

                def answered(result: Any, error: BaseException | None, group: RaftGroup = group) -> None:
                    with node.disk.lock:
                        durable = node.disk.durable_index[group.group_id]
                        node.disk.events.append(("ack", group.group_id))
                    acks.append((group.group_id, durable, result, error))

                index = group.propose(b"record batch", answered)
                assert index is not None
                node.disk.record("proposed", group.group_id, index)

        node.on_thread(propose_everywhere)
        node.wait_until(lambda: len(acks) == groups, "every producer to be answered")

        events = node.disk.snapshot_events()
        assert node.store.syncs - syncs_before == 1, f"one sync for {groups} groups' proposals: {events}"
        proposed = {e[1]: e[2] for e in events if e[0] == "proposed"}
        for group_id, durable, result, error in acks:
            assert error is None
            assert result == f"result {proposed[group_id]}"  # the state machine's result for that entry
            assert durable >= proposed[group_id], f"group {group_id} answered before its entry was durable"
        sync_at = next(p for p, e in enumerate(events) if e[0] == "sync")
        assert min(p for p, e in enumerate(events) if e[0] in ("ack", "apply")) > sync_at


def test_a_quiescent_group_is_not_ticked_until_a_message_wakes_it() -> None:
    with node1(2, (1, 2, 3), tick_ms=2, election_tick=100_000) as node:
        sleeper, awake = node.groups
        node.on_thread(lambda: node.scheduler.deliver([_append_from_leader(g.group_id, 2, 2) for g in node.groups]))
        node.wait_until(lambda: len(node.sent(T.APP_RESP)) == 2, "both appends acknowledged")
        # The leader goes idle: its quiesce heartbeat puts one group to sleep; the other keeps hearing from it.
        node.on_thread(
            lambda: node.scheduler.deliver([_heartbeat(1, 2, quiesce=True), _heartbeat(2, 2, quiesce=False)])
        )
        node.wait_until(lambda: sleeper.raw.quiescent, "the group to go quiescent")
        ticks_at_sleep = sleeper.raw.ticks
        awake_at_sleep = awake.raw.ticks
        node.wait_until(lambda: awake.raw.ticks >= awake_at_sleep + 50, "50 ticks of the awake group")

        assert sleeper.raw.ticks_while_quiescent == 0
        assert sleeper.raw.ticks == ticks_at_sleep

        node.on_thread(lambda: node.scheduler.deliver([_heartbeat(1, 2, quiesce=False)]))
        node.wait_until(lambda: sleeper.raw.ticks >= ticks_at_sleep + 20, "the woken group to be ticked again")
        assert not sleeper.raw.quiescent


def test_a_write_the_raft_adapter_reports_failed_discards_the_round_answers_its_producers_and_stops_the_node() -> None:
    with node1(1, (1,)) as node:
        group = node.groups[0]
        storage = cast(RecordingStorage, group.storage)

        def campaign() -> None:
            group.raw.campaign()
            node.scheduler.touch(group)

        node.on_thread(campaign)
        node.wait_until(lambda: group.is_leader and bool(group.machine.applied), "a leader")
        syncs_before = node.store.syncs
        # RaftLogStorage reports a full LMDB map (storage.StorageFullError) as a raft.RaftStorageError.
        storage.failure = raft.RaftStorageError("map full")
        answers: list[BaseException | None] = []
        node.on_thread(lambda: group.propose(b"record batch", lambda _, error: answers.append(error)))
        node.wait_until(lambda: bool(answers), "the producer's answer")

        assert isinstance(answers[0], StorageFailureError), answers
        assert node.store.rollbacks == 1, "the failed round's transaction is rolled back"
        assert node.store.syncs == syncs_before, "nothing of the failed round is synced"
        node.wait_until(lambda: not node.scheduler.alive, "the scheduler to stop: the store cannot go on")


def _leaders(node: Node1) -> None:
    def campaign() -> None:
        for group in node.groups:
            group.raw.campaign()
            node.scheduler.touch(group)

    node.on_thread(campaign)
    node.wait_until(lambda: all(g.is_leader and g.machine.applied for g in node.groups), "leaders")


def _commits(node: Node1, group: RaftGroup) -> Any:
    """Propose on ``group`` from the scheduler thread and wait for the answer; returns (result, error)."""
    answers: list[tuple[Any, BaseException | None]] = []
    node.scheduler.submit(lambda: group.propose(b"record batch", lambda result, error: answers.append((result, error))))
    node.wait_until(lambda: bool(answers), f"group {group.group_id}'s proposal to be answered")
    return answers[0]


class _Poisoned:
    """Work that fails the way handling one bad request can; its repr is what the log shows."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.ran = threading.Event()

    def __call__(self) -> None:
        self.ran.set()
        raise self.error

    def __repr__(self) -> str:
        return f"<poisoned work raising {self.error!r}>"


@pytest.mark.parametrize(
    "error",
    [
        TypeError("'int' object is not iterable"),
        ValueError("bad value"),
        OverflowError("int too big to convert"),
        KeyError("missing"),
        InvalidArgumentError("a handler refused a request", field="offsets"),
        UnavailableError("no leader yet"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_work_that_raises_fails_alone_and_the_scheduler_keeps_committing_other_groups(
    error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    with node1(2, (1,)) as node:
        _leaders(node)
        first, second = node.groups
        poisoned = _Poisoned(error)
        with caplog.at_level(logging.WARNING, logger="multiraft.node.scheduler.scheduler"):
            node.scheduler.submit(poisoned)
            assert poisoned.ran.wait(5.0), "the scheduler thread did not run the work"
            node.wait_until(
                lambda: any("poisoned work" in str(r.msg) for r in caplog.records), "the failed work to be logged"
            )

        assert _commits(node, second) == (f"result {second.machine.applied[-1]}", None)
        assert _commits(node, first) == (f"result {first.machine.applied[-1]}", None)
        assert node.scheduler.alive


@pytest.mark.parametrize(
    "error",
    [StorageError("I/O error"), raft.RaftStorageError("map full"), StorageFailureError("storage failed: I/O error")],
    ids=lambda error: type(error).__name__,
)
def test_work_that_fails_on_storage_still_stops_the_node(error: BaseException) -> None:
    with node1(1, (1,)) as node:
        group = node.groups[0]
        node.scheduler.submit(_Poisoned(error))
        node.wait_until(lambda: not node.scheduler.alive, "the scheduler to stop: its disk failed")
        assert group.pending == {}


def test_a_proposal_no_log_entry_can_hold_is_refused_and_never_written() -> None:
    with node1(1, (1,)) as node:
        _leaders(node)
        group = node.groups[0]
        storage = cast(RecordingStorage, group.storage)
        largest = StorageConfig().max_entry_bytes - ENTRY_OVERHEAD_BYTES
        answers: list[tuple[Any, BaseException | None]] = []
        node.on_thread(
            lambda: group.propose(
                b"\x00" * (largest + 1), lambda r, e: answers.append((r, e)), kind=raft.EntryKind.CONTROL
            )
        )
        ((result, error),) = answers
        assert result is None and isinstance(error, RecordTooLargeError)
        assert error.metadata["max_bytes"] == str(largest)
        assert group.pending == {} and storage.last_index() == group.machine.applied[-1]
        assert _commits(node, group)[1] is None and node.scheduler.alive


def test_a_stored_entry_that_fails_its_check_in_a_round_hands_its_group_to_the_repair_and_the_node_goes_on() -> None:
    with node1(2, (1,)) as node:
        damaged, healthy = node.groups
        _leaders(node)
        reported: list[tuple[int, int]] = []
        node.on_thread(lambda: setattr(node.scheduler, "on_damage", lambda g, i: reported.append((g.group_id, i))))
        storage = cast(RecordingStorage, damaged.storage)
        read = storage.entries

        def entries_failing_their_check(lo: int, hi: int, max_size: int) -> list[raft.Entry]:
            if hi > 2:  # what the adapter raises when the segmented log finds a CRC mismatch at index 2
                try:
                    raise CorruptionError("entry CRC mismatch", path="data.mdb", index=2)
                except CorruptionError as exc:
                    raise raft.RaftStorageError(str(exc)) from exc
            return read(lo, hi, max_size)

        storage.entries = entries_failing_their_check  # type: ignore[method-assign]
        answers: list[BaseException | None] = []
        node.on_thread(lambda: damaged.propose(b"batch", lambda _, error: answers.append(error)))
        node.wait_until(lambda: bool(reported), "the damage report")

        assert reported == [(damaged.group_id, 2)]
        assert damaged.group_id not in node.scheduler.groups and healthy.group_id in node.scheduler.groups
        assert node.scheduler.alive
        node.wait_until(lambda: bool(answers), "the producer's answer")
        assert isinstance(answers[0], UnavailableError)
        assert _commits(node, healthy)[1] is None  # the other group still commits
