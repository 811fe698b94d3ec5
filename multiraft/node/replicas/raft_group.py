"""One Raft group hosted by a node, as its replica sees it: the handle a replica proposes through.

A :class:`RaftGroup` holds the group's Raft core, its storage, its state machine (the replica) and the
completions of the proposals it has in flight. A replica decides what to propose and proposes on the group it
is handed (:meth:`RaftGroup.propose`); the group rings its :class:`Wakeups` so that the scheduler, which drives
every group in rounds, picks it up in its next round and, once the entry is applied, answers the completion.
Nothing here imports the scheduler: the scheduler drives the groups, never the other way round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from multiraft import raft
from multiraft.errors import NotLeaderError, RecordTooLargeError, UnavailableError
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.node.threads import SchedulerOwned, ThreadOwner
from storage import StorageConfig

__all__ = ["Completion", "StateMachine", "RaftGroup", "Wakeups"]

Completion = Callable[[Any, BaseException | None], None]
"""Called on the scheduler thread with (result, error) when a proposal is applied or fails."""


class StateMachine(Protocol):
    """What applies a group's committed entries (a replica); lives on the scheduler thread."""

    def apply(self, group: RaftGroup, entries: Sequence[raft.Entry]) -> dict[int, Any]:
        """Apply committed entries in order; return results for the indexes that have one."""
        ...

    def on_role_change(self, group: RaftGroup, soft_state: raft.SoftState) -> None: ...

    def on_snapshot(self, group: RaftGroup, snapshot: raft.Snapshot) -> None: ...


class Wakeups(SchedulerOwned):
    """What the groups share with the scheduler that drives them: the groups that got input (checked for a
    Ready in the next round) and those awake (ticked until they go quiescent), which a group joins when it
    proposes, and the largest entry the log store accepts. The scheduler reads and clears the sets."""

    def __init__(
        self, owner: ThreadOwner | None = None, max_payload_bytes: int = StorageConfig().max_payload_bytes
    ) -> None:
        self.owner = owner if owner is not None else ThreadOwner("scheduler")  # unbound: a group not driven yet
        self.touched: set[int] = set()
        self.awake: set[int] = set()
        self.max_payload_bytes = max_payload_bytes


@dataclass
class _Pending:
    term: int
    completion: Completion


@dataclass
class RaftGroup(SchedulerOwned):
    """One Raft group hosted by this node (scheduler thread)."""

    group_id: int
    raw: raft.RawNode
    storage: RaftLogStorage
    machine: StateMachine
    pending: dict[int, _Pending] = field(default_factory=dict)
    leader_id: int = 0
    role: raft.Role = raft.Role.FOLLOWER
    # The scheduler's once it drives the group (Scheduler.add_group); until then a set of the group's own.
    wakeups: Wakeups = field(default_factory=Wakeups)

    def __post_init__(self) -> None:
        self.owner = self.wakeups.owner

    def join(self, wakeups: Wakeups) -> None:
        """From now on the scheduler that owns ``wakeups`` drives this group."""
        self.wakeups = wakeups
        self.owner = wakeups.owner

    @property
    def is_leader(self) -> bool:
        return self.role is raft.Role.LEADER

    def propose(
        self,
        payload: bytes | memoryview,
        completion: Completion,
        *,
        kind: raft.EntryKind = raft.EntryKind.DATA,
    ) -> int | None:
        """Propose on this leader; ``completion`` runs when the entry is applied (or fails). The index
        proposed at, or None when the proposal was refused (``completion`` has been answered then)."""
        wakeups = self.wakeups
        if len(payload) > wakeups.max_payload_bytes:
            # The store would refuse the entry at write time, which stops the node: refuse the request instead.
            completion(
                None,
                RecordTooLargeError(
                    f"an entry of {len(payload)} bytes exceeds what one log entry holds ({wakeups.max_payload_bytes})",
                    max_bytes=wakeups.max_payload_bytes,
                ),
            )
            return None
        raw = self.raw
        try:
            index = raw.propose(payload, kind=kind, timestamp_ms=int(time.time() * 1000))
        except raft.NotLeader as exc:
            completion(None, self.not_leader(exc.leader_id))
            return None
        except raft.ProposalDropped as exc:
            completion(None, UnavailableError(f"proposal dropped: {exc}"))
            return None
        self.pending[index] = _Pending(raw.term, completion)
        group_id = self.group_id
        wakeups.touched.add(group_id)
        wakeups.awake.add(group_id)
        return index

    def touch(self) -> None:
        """The group got input: the scheduler checks it for a Ready next round and ticks it while it is awake."""
        wakeups = self.wakeups
        wakeups.touched.add(self.group_id)
        wakeups.awake.add(self.group_id)

    def not_leader(self, leader_hint: int | None) -> NotLeaderError:
        leader = leader_hint or self.leader_id or self.raw.leader_id
        return NotLeaderError(f"node {self.raw.id} does not lead group {self.group_id}", leader_id=leader)

    def fail_pending(self, error: BaseException) -> None:
        pending, self.pending = self.pending, {}
        for item in pending.values():
            item.completion(None, error)
