"""Commit and applied indexes that need no LMDB commit of their own.

A Ready that only moves a group's commit index and applies entries (no entries, term, vote, snapshot or
configuration) writes nothing that must be durable: Raft learns the commit index again from the leader, and
entries are applied again after a crash. Written and synced at once, as every round used to, they cost an LMDB
commit (two fdatasyncs) per message on every node, between one proposal and the next. They are kept here
instead and written into the transaction of the next sync, whatever makes it (the next entries, work between
rounds, or the scheduler's tick when nothing else comes), before anything else of that transaction, so that
the newer writes of a Ready win.

A group's commit and the applied index reached under it are always written together, so a rollback or a crash
loses both or neither and never leaves a stored applied index above the stored commit. What a rolled-back
transaction held is kept again, as a rolled-back round's Readies are, and written with the next sync.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiraft import raft
from multiraft.node.threads import SchedulerOwned, ThreadOwner

if TYPE_CHECKING:
    from multiraft.node.replicas.raft_group import RaftGroup

__all__ = ["DeferredIndexes", "lazy"]


def lazy(ready: raft.Ready) -> bool:
    """The Ready writes nothing that must be durable: only a commit index and an applied one."""
    return not ready.must_sync and ready.snapshot is None and ready.conf_state is None


class DeferredIndexes(SchedulerOwned):
    """Per group, the newest hard state (commit) and applied index not yet written (scheduler thread)."""

    def __init__(self, owner: ThreadOwner | None = None) -> None:
        self.owner = owner if owner is not None else ThreadOwner("scheduler")
        self._waiting: dict[int, tuple[RaftGroup, raft.HardState | None, int]] = {}
        self._in_transaction: dict[int, tuple[RaftGroup, raft.HardState | None, int]] = {}

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def defer(self, group: RaftGroup, ready: raft.Ready) -> None:
        previous = self._waiting.get(group.group_id)
        hard_state, applied = (previous[1], previous[2]) if previous and previous[0] is group else (None, 0)
        if ready.committed_entries:
            applied = ready.committed_entries[-1].index
        if ready.hard_state is not None or applied:
            self._waiting[group.group_id] = (group, ready.hard_state or hard_state, applied)

    def write(self, groups: dict[int, RaftGroup]) -> None:
        """Write what waits into the current transaction (of groups still hosted as they were)."""
        waiting, self._waiting = self._waiting, {}
        for group_id, (group, hard_state, applied) in waiting.items():
            if groups.get(group_id) is not group:
                continue  # removed, or taken out for repair: its log is closed or being rebuilt
            if hard_state is not None:
                group.storage.set_hard_state(hard_state)
            if applied:
                group.storage.set_applied(applied)
            self._in_transaction[group_id] = (group, hard_state, applied)

    def synced(self) -> None:
        self._in_transaction = {}

    def rolled_back(self) -> None:
        """The transaction was rolled back: what it held waits again, under anything newer."""
        older, self._in_transaction = self._in_transaction, {}
        for group_id, (group, old_hard_state, old_applied) in older.items():
            newer = self._waiting.get(group_id)
            if newer is None:
                self._waiting[group_id] = (group, old_hard_state, old_applied)
            elif newer[0] is group:
                self._waiting[group_id] = (group, newer[1] or old_hard_state, newer[2] or old_applied)
            # else: another replica of the group now; the old one's indexes mean nothing to it
