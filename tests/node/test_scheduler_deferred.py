"""Commit and applied indexes cost no LMDB commit of their own: they ride with the next sync.

A round that only moves a group's commit index and applies entries writes nothing that must be durable, so it
neither writes nor syncs; the next sync (the next entries, or the scheduler's tick when nothing else comes)
writes those indexes first, in its own transaction. A commit and the applied index reached under it are written
together, and what a rolled-back transaction held is written again with the next one.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

from multiraft import raft
from multiraft.node.scheduler.deferred_indexes import DeferredIndexes
from multiraft.node.scheduler.scheduler import RaftGroup
from tests.node.test_scheduler import NODE, PEER, T, node1

GROUP = 1


def _append(index: int, commit: int) -> tuple[int, raft.Message]:
    """Leader 2 of term 2 appends the entry at ``index`` (the entries before it are of term 2, but for the
    bootstrap entry at 1) and says the commit index is ``commit``."""
    entry = raft.Entry(index, 2, raft.EntryKind.DATA, 0, b"payload %d" % index)
    previous_term = 1 if index == 2 else 2
    message = raft.Message(type=T.APP, to=NODE, sender=PEER, term=2, index=index - 1, log_term=previous_term)
    return GROUP, replace(message, entries=[entry], commit=commit)


def _commit_only(index: int) -> tuple[int, raft.Message]:
    """Leader 2's empty append that moves the commit index to ``index`` (its last entry)."""
    return GROUP, raft.Message(type=T.APP, to=NODE, sender=PEER, term=2, index=index, log_term=2, commit=index)


def _writes_and_syncs(events: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [
        ("sync",) if e[0] == "sync" else (e[2], e[3].commit if e[2] == "hard_state" else e[3])
        for e in events
        if e[0] == "sync" or e[0] == "write"
    ]


def test_a_round_that_only_commits_writes_nothing_and_the_next_entries_carry_its_indexes() -> None:
    with node1(1, (1, 2, 3)) as node:
        node.on_thread(lambda: node.scheduler.deliver([_append(2, commit=1)]))
        node.wait_until(lambda: len(node.sent(T.APP_RESP)) == 1, "the ack of entry 2")
        syncs = node.store.syncs
        node.disk.forget_history()

        node.on_thread(lambda: node.scheduler.deliver([_commit_only(2)]))
        node.wait_until(lambda: node.groups[0].machine.applied == [2], "entry 2 to be applied")
        node.on_thread(lambda: None)  # the round that applied it is over
        assert node.store.syncs == syncs, "a commit alone cost a sync"
        assert _writes_and_syncs(node.disk.snapshot_events()) == [], "a commit alone was written at once"

        node.on_thread(lambda: node.scheduler.deliver([_append(3, commit=2)]))
        node.wait_until(lambda: any(e[3].index == 3 for e in node.sent(T.APP_RESP)), "the ack of entry 3")
        assert node.store.syncs == syncs + 1
        assert _writes_and_syncs(node.disk.snapshot_events()) == [
            ("hard_state", 2),
            ("applied", 2),
            ("entries", 3),
            ("sync",),
        ], "the deferred commit and applied index go first, in the one transaction of the next entries"


def test_deferred_indexes_are_synced_at_the_next_tick_when_nothing_else_is_written() -> None:
    with node1(1, (1, 2, 3), tick_ms=20, election_tick=100_000) as node:
        node.on_thread(lambda: node.scheduler.deliver([_append(2, commit=1)]))
        node.wait_until(lambda: len(node.sent(T.APP_RESP)) == 1, "the ack of entry 2")
        node.disk.forget_history()

        node.on_thread(lambda: node.scheduler.deliver([_commit_only(2)]))
        node.wait_until(
            lambda: any(e[0] == "sync" for e in node.disk.snapshot_events()), "a tick to sync the deferred commit"
        )
        written = _writes_and_syncs(node.disk.snapshot_events())
        assert written[:3] == [("hard_state", 2), ("applied", 2), ("sync",)]


def test_what_was_written_after_a_round_is_synced_at_the_next_tick_when_no_round_comes() -> None:
    """Issue 23 (finding 8): a replica dropped, or a deleted topic's log, stayed in the store of a node whose
    groups were all quiet until its next Raft round, and came back after a crash."""
    with node1(1, (1, 2, 3), tick_ms=20, election_tick=100_000) as node:
        node.on_thread(lambda: node.scheduler.deliver([_append(2, commit=2)]))
        node.wait_until(lambda: len(node.sent(T.APP_RESP)) == 1, "the ack of entry 2")
        node.wait_until(lambda: not node.scheduler._deferred, "the deferred indexes synced")
        syncs = node.store.syncs

        def drop_a_log() -> None:  # as Store.drop_local_replica does: a write outside any round
            node.store.writes_pending = True

        node.on_thread(drop_a_log)
        node.wait_until(lambda: node.store.syncs > syncs, "a tick to sync what was written after the round")
        assert not node.store.writes_pending


class _Storage:
    def __init__(self, writes: list[tuple[str, int]]) -> None:
        self.writes = writes

    def set_hard_state(self, hard_state: raft.HardState) -> None:
        self.writes.append(("commit", hard_state.commit))

    def set_applied(self, index: int, conf_state: raft.ConfState | None = None) -> None:
        self.writes.append(("applied", index))


def _ready(commit: int | None, applied: int | None) -> raft.Ready:
    committed = [raft.Entry(applied, 2, raft.EntryKind.DATA, 0, b"")] if applied else []
    hard_state = raft.HardState(2, 0, commit) if commit is not None else None
    return raft.Ready(None, hard_state, None, (), False, (), (), committed, None, ())


def test_what_a_rolled_back_transaction_held_is_written_again_under_anything_newer() -> None:
    writes: list[tuple[str, int]] = []
    group = cast(RaftGroup, SimpleNamespace(group_id=GROUP, storage=_Storage(writes)))
    deferred = DeferredIndexes()
    deferred.defer(group, _ready(commit=5, applied=5))
    deferred.write({GROUP: group})
    deferred.rolled_back()
    deferred.defer(group, _ready(commit=None, applied=6))  # applies what an earlier Ready committed

    writes.clear()
    deferred.write({GROUP: group})
    assert writes == [("commit", 5), ("applied", 6)], "an applied index was written without its commit"
    deferred.synced()
    deferred.rolled_back()
    writes.clear()
    deferred.write({GROUP: group})
    assert writes == [], "a synced transaction's indexes came back"


def test_the_indexes_of_a_group_no_longer_hosted_are_never_written() -> None:
    writes: list[tuple[str, int]] = []
    group = cast(RaftGroup, SimpleNamespace(group_id=GROUP, storage=_Storage(writes)))
    replacement = cast(RaftGroup, SimpleNamespace(group_id=GROUP, storage=_Storage(writes)))
    deferred = DeferredIndexes()
    deferred.defer(group, _ready(commit=5, applied=5))
    deferred.write({})  # removed
    deferred.defer(group, _ready(commit=6, applied=6))
    deferred.write({GROUP: replacement})  # rebuilt by a repair: a new replica
    assert writes == []
