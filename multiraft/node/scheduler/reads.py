"""Linearizable reads of a group's state machine, through Raft's ReadIndex.

A leader's state may be stale: cut off by a partition, it keeps its role until CheckQuorum steps it down (a
quiescent group never checks), and meanwhile another leader commits. So a read that must see every
acknowledged write (the committed offsets of a consumer group) is served only after a quorum confirmed this
leader at the read's time (``RawNode.read_index``) and the state machine applied up to the index it was given;
a read no quorum confirms within ``timeout_s`` fails retriable, and the client asks again, perhaps elsewhere.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from multiraft import raft
from multiraft.errors import MultiraftError, NotLeaderError, UnavailableError
from multiraft.node.threads import SchedulerOwned, ThreadOwner, on_owner_thread

if TYPE_CHECKING:
    from multiraft.node.replicas.raft_group import Completion, RaftGroup

__all__ = ["LinearizableReads", "READ_TIMEOUT_S"]

READ_TIMEOUT_S = 5.0


@dataclass
class _Read:
    group_id: int
    serve: Callable[[], Any]
    completion: Completion
    deadline: float
    index: int = 0  # the applied index it waits for, once a quorum confirmed it (0: not yet)


class LinearizableReads(SchedulerOwned):
    """Reads waiting for their quorum or for the apply (scheduler thread)."""

    def __init__(self, owner: ThreadOwner, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.owner = owner
        self._timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._unconfirmed: dict[bytes, _Read] = {}
        self._confirmed: dict[int, list[_Read]] = {}  # group id -> reads waiting for the apply

    @on_owner_thread
    def start(self, group: RaftGroup, serve: Callable[[], Any], completion: Completion) -> None:
        """Serve ``serve()`` to ``completion`` once it is linearizable; errors go to ``completion`` too."""
        context = b"read-%d" % next(self._ids)
        try:
            group.raw.read_index(context)
        except raft.NotLeader:
            completion(None, NotLeaderError(f"group {group.group_id}: no leader to confirm a read"))
            return
        self._unconfirmed[context] = _Read(group.group_id, serve, completion, time.monotonic() + self._timeout_s)

    @on_owner_thread
    def after_apply(self, group: RaftGroup, read_states: Any) -> None:
        """After a Ready was applied: take its confirmed reads, and serve those the apply has reached."""
        for state in read_states:
            read = self._unconfirmed.pop(state.context, None)
            if read is not None:
                read.index = state.index
                self._confirmed.setdefault(group.group_id, []).append(read)
        waiting = self._confirmed.get(group.group_id)
        if not waiting:
            return
        applied = group.raw.applied_index
        due = [read for read in waiting if read.index <= applied]
        if due:
            self._confirmed[group.group_id] = [read for read in waiting if read.index > applied]
            for read in due:
                self._serve(read)

    def waiting(self, group_id: int) -> bool:
        return bool(self._confirmed.get(group_id))

    @on_owner_thread
    def expire(self) -> None:
        """Fail the reads no quorum confirmed (or the apply did not reach) in time."""
        now = time.monotonic()
        late = [context for context, read in self._unconfirmed.items() if read.deadline <= now]
        for context in late:
            self._fail(self._unconfirmed.pop(context))
        for group_id, reads in list(self._confirmed.items()):
            kept = [read for read in reads if read.deadline > now]
            for read in reads:
                if read.deadline <= now:
                    self._fail(read)
            self._confirmed[group_id] = kept

    def _fail(self, read: _Read) -> None:
        read.completion(None, UnavailableError(f"group {read.group_id}: no quorum confirmed the read in time"))

    @staticmethod
    def _serve(read: _Read) -> None:
        try:
            result = read.serve()
        except MultiraftError as exc:
            read.completion(None, exc)
            return
        read.completion(result, None)
