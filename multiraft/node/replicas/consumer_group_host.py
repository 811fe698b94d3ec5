"""The consumer-group coordinators of one ``__consumer_offsets`` partition, hosted on its leader (scheduler
thread).

Every replica of the partition applies the group records (:class:`multiraft.consumer_groups.GroupRecords`, kept by
:class:`~multiraft.node.replicas.offsets.OffsetsMachine`); only the leader runs coordinators. A group's coordinator is
built on first use from the group's last record, once the leader is current (it applied an entry of its own
term, so it holds every record its predecessors committed). Each request runs the pure state machine
(:class:`multiraft.consumer_groups.GroupCoordinator`) and carries out its :class:`~multiraft.consumer_groups.Outcome`:

1. the records are proposed as CONTROL entries of the partition; what the outcome answers waits until they
   are committed (the steps of one group run in order, so no reply overtakes an earlier group's records);
2. the caller is answered, or its request parked under (member id, kind) until a later outcome answers it;
   a newer parked request of the same member and kind replaces the older, which is told to rejoin;
3. the parked requests the outcome addresses are answered.

If a proposal fails (the leadership was lost, or the entry refused), the group's coordinator is dropped and
every waiter told ``COORDINATOR_NOT_AVAILABLE``: the group is rebuilt from its committed records, here or on
the new leader. Losing the leadership unloads every coordinator the same way. Time is the monotonic clock in
milliseconds; :func:`multiraft.node.services.local_consumer_groups.tick_group_hosts` ticks the coordinators.
"""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from multiraft import consumer_groups as g
from multiraft import raft
from multiraft.errors import (
    CoordinatorMovedError,
    GroupRebalancingError,
    MultiraftError,
    NotLeaderError,
    UnavailableError,
)
from multiraft.logging import get_logger
from multiraft.node.replicas.consumer_group_errors import client_error
from multiraft.node.replicas.raft_group import Completion, RaftGroup
from multiraft.node.threads import SchedulerOwned, ThreadOwner, on_owner_thread
from multiraft.node.vocabulary.consumer_groups import (
    GroupDelete,
    GroupDescribe,
    GroupHeartbeat,
    GroupJoin,
    GroupLeave,
    GroupListingRow,
    GroupOperation,
    GroupsAnswer,
    GroupsList,
    GroupSync,
)

__all__ = ["ConsumerGroupHost", "ConsumerGroupsReplica", "new_member_id", "monotonic_ms"]

log = get_logger(__name__)

Clock = Callable[[], int]


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def new_member_id(client_id: str) -> str:
    """Kafka's member ids: the client id and a random UUID."""
    return f"{client_id or 'member'}-{uuid.uuid4()}"


class ConsumerGroupsReplica(Protocol):
    """What the host reads of its partition's replicated state (the OffsetsMachine)."""

    @property
    def records(self) -> g.GroupRecords: ...

    @property
    def current(self) -> bool: ...

    def has_offsets(self, name: str) -> bool: ...

    def offset_groups(self) -> Iterable[str]: ...


_Key = tuple[str, str, str]  # (group, member id, "join" | "sync")


@dataclass(eq=False)  # identity: a completion finds its own step
class _Step:
    """One outcome's actions, run once its records are committed (``waiting`` reaches 0)."""

    waiting: int = 0
    park: tuple[str, str, Completion] | None = None  # (member id, kind, caller)
    answer: tuple[Completion, g.Reply | None] | None = None  # None reply: the call succeeded with no value
    deferred: tuple[g.Reply, ...] = ()
    done: Completion | None = None  # a call answered (None, None) once committed (delete)


@dataclass
class _GroupSlot:
    coordinator: g.GroupCoordinator
    steps: collections.deque[_Step] = field(default_factory=collections.deque)


def _kind(reply: g.Reply) -> str:
    return "join" if isinstance(reply, g.JoinReply) else "sync" if isinstance(reply, g.SyncReply) else "other"


def _answer(completion: Completion, reply: g.Reply | None) -> None:
    if reply is not None and reply.error is not None:
        completion(None, client_error(reply.error))
    elif isinstance(reply, g.JoinReply | g.SyncReply):
        completion(reply, None)
    else:
        completion(None, None)


class ConsumerGroupHost(SchedulerOwned):
    """The coordinators of one ``__consumer_offsets`` partition while this node leads it."""

    def __init__(
        self,
        owner: ThreadOwner,
        replica: ConsumerGroupsReplica,
        settings: g.GroupSettings,
        member_ids: g.MemberIdFactory = new_member_id,
        clock: Clock = monotonic_ms,
    ) -> None:
        self.owner = owner
        self._replica = replica
        self._settings = settings
        self._member_ids = member_ids
        self._clock = clock
        self._slots: dict[str, _GroupSlot] = {}
        self._parked: dict[_Key, Completion] = {}

    @property
    def loaded(self) -> tuple[str, ...]:
        return tuple(self._slots)

    # ------------------------------------------------------------------------------------------ requests

    @on_owner_thread
    def handle(self, group: RaftGroup, operation: GroupOperation, completion: Completion) -> None:
        """Serve one group operation on the partition's leader; ``completion`` gets the reply or an error."""
        try:
            self._ready(group)
            now = self._clock()
            if isinstance(operation, GroupsList):
                completion(self.listings(now), None)
            elif isinstance(operation, GroupDescribe):
                completion(self.describe(operation.group, now), None)
            elif isinstance(operation, GroupDelete):
                self._delete(group, operation.group, completion, now)
            else:
                coordinator = self._slot(operation.group, now).coordinator
                if isinstance(operation, GroupJoin):
                    outcome = coordinator.join(operation.request, now)
                elif isinstance(operation, GroupSync):
                    outcome = coordinator.sync(operation.request, now)
                elif isinstance(operation, GroupHeartbeat):
                    outcome = coordinator.heartbeat(operation.request, now)
                else:
                    assert isinstance(operation, GroupLeave)
                    outcome = coordinator.leave(operation.request, now)
                kind = "join" if isinstance(operation, GroupJoin) else "sync"
                self._carry_out(group, operation.group, outcome, completion, kind)
        except g.GroupCoordinatorError as exc:
            completion(None, client_error(exc))
        except MultiraftError as exc:
            completion(None, exc)

    @on_owner_thread
    def read(self, group: RaftGroup, operation: GroupsList | GroupDescribe) -> GroupsAnswer:
        """The answer of a read-only operation, now (the caller confirmed the leadership with a quorum)."""
        self._ready(group)
        now = self._clock()
        if isinstance(operation, GroupsList):
            return self.listings(now)
        return self.describe(operation.group, now)

    @on_owner_thread
    def check_commit(
        self,
        group: RaftGroup,
        name: str,
        member_id: str,
        generation: int,
        instance_id: str | None,
        partitions: Iterable[g.TopicPartition],
    ) -> None:
        """Raise the client-face reason an offset commit may not move ``name``'s offsets (fencing)."""
        outside = generation == g.NO_GENERATION and not member_id and instance_id is None
        if outside and name not in self._slots and name not in self._replica.records.groups:
            return  # a group that never had members: commits from outside any generation, as always
        self._ready(group)
        coordinator = self._slot(name, self._clock()).coordinator
        try:
            g.check_offset_commit(coordinator, member_id, generation, partitions, instance_id)
        except g.GroupCoordinatorError as exc:
            raise client_error(exc) from exc

    def _ready(self, group: RaftGroup) -> None:
        if not group.is_leader:
            leader = group.leader_id or group.raw.leader_id
            raise NotLeaderError(f"node {group.raw.id} does not coordinate these groups", leader_id=leader)
        if not self._replica.current:
            raise UnavailableError("the new group coordinator is still catching up")

    def _slot(self, name: str, now: int) -> _GroupSlot:
        slot = self._slots.get(name)
        if slot is not None and (slot.coordinator.state is not g.GroupState.DEAD or slot.steps):
            return slot
        coordinator = self._replica.records.coordinator(name, self._member_ids, now, self._settings)
        slot = self._slots[name] = _GroupSlot(coordinator)
        return slot

    # ------------------------------------------------------------------------------------------ views

    def describe(self, name: str, now: int) -> g.GroupMetadataRecord:
        slot = self._slots.get(name)
        if slot is not None and slot.coordinator.state is not g.GroupState.DEAD:
            return slot.coordinator.snapshot(now)
        record = self._replica.records.groups.get(name)
        if record is not None:
            return self._slot(name, now).coordinator.snapshot(now)
        state = g.GroupState.EMPTY if self._replica.has_offsets(name) else g.GroupState.DEAD
        return g.GroupMetadataRecord(name, 0, state, None, None, "", (), now)

    def listings(self, now: int) -> tuple[GroupListingRow, ...]:
        names = set(self._replica.offset_groups()) | set(self._replica.records.groups)
        names |= {n for n, s in self._slots.items() if s.coordinator.state is not g.GroupState.DEAD}
        rows = []
        for name in sorted(names):
            slot = self._slots.get(name)
            if slot is not None and slot.coordinator.state is not g.GroupState.DEAD:
                c = slot.coordinator
                rows.append(GroupListingRow(name, c.state.value, c.protocol_type or "", len(c.member_ids)))
                continue
            record = self._replica.records.groups.get(name)
            if record is not None:
                rows.append(GroupListingRow(name, record.state.value, record.protocol_type or "", len(record.members)))
            elif self._replica.has_offsets(name):
                rows.append(GroupListingRow(name, g.GroupState.EMPTY.value, "", 0))
        return tuple(rows)

    # ------------------------------------------------------------------------------------------ outcomes

    def _delete(self, group: RaftGroup, name: str, completion: Completion, now: int) -> None:
        known = name in self._slots or name in self._replica.records.groups or self._replica.has_offsets(name)
        if not known:
            completion(None, None)  # nothing to delete (Kafka says GROUP_ID_NOT_FOUND; deleting is idempotent)
            return
        outcome = self._slot(name, now).coordinator.delete()
        self._carry_out(group, name, outcome, completion, "delete")

    def _carry_out(
        self, group: RaftGroup, name: str, outcome: g.Outcome, completion: Completion | None, kind: str
    ) -> None:
        slot = self._slots[name]
        step = _Step(deferred=outcome.deferred)
        if completion is not None:
            if outcome.reply is not None:
                step.answer = (completion, outcome.reply)
            elif outcome.parked_as:
                step.park = (outcome.parked_as, kind, completion)
            else:
                step.done = completion
        try:
            payloads = [g.encode_group_record(record) for record in outcome.records]
        except g.GroupRecordEncodeError as exc:
            slot.steps.append(step)
            self._fail(name, f"a group record could not be encoded: {exc}")
            return
        step.waiting = len(payloads)
        slot.steps.append(step)

        def committed(_result: object, error: BaseException | None) -> None:
            self._committed(name, step, error)

        for payload in payloads:
            group.propose(payload, committed, kind=raft.EntryKind.CONTROL)
        self._flush(name)

    def _committed(self, name: str, step: _Step, error: BaseException | None) -> None:
        slot = self._slots.get(name)
        if slot is None or step not in slot.steps:
            return  # the group was dropped meanwhile: its waiters were answered then
        if error is not None:
            log.info("a group record was not committed; the coordinator is dropped", group=name, error=str(error))
            self._fail(name, f"the coordinator of group {name!r} lost its records: {error}")
            return
        step.waiting -= 1
        self._flush(name)

    def _flush(self, name: str) -> None:
        slot = self._slots.get(name)
        while slot is not None and slot.steps and slot.steps[0].waiting <= 0:
            self._run(name, slot.steps.popleft())

    def _run(self, name: str, step: _Step) -> None:
        if step.park is not None:
            member_id, kind, caller = step.park
            older = self._parked.pop((name, member_id, kind), None)
            if older is not None:
                older(None, GroupRebalancingError(f"a newer {kind} request of member {member_id!r} replaced this one"))
            self._parked[(name, member_id, kind)] = caller
        if step.answer is not None:
            _answer(*step.answer)
        if step.done is not None:
            step.done(None, None)
        for reply in step.deferred:
            waiting = self._parked.pop((name, reply.member_id, _kind(reply)), None)
            if waiting is not None:
                _answer(waiting, reply)

    def _fail(self, name: str, why: str) -> None:
        """Drop the group's coordinator and tell everyone waiting on it to find the coordinator again."""
        slot = self._slots.pop(name, None)
        moved = CoordinatorMovedError(why)
        if slot is not None:
            slot.coordinator.unload()
            for step in slot.steps:
                for caller in (step.park[2] if step.park else None, step.answer[0] if step.answer else None, step.done):
                    if caller is not None:
                        caller(None, moved)
        for key in [k for k in self._parked if k[0] == name]:
            self._parked.pop(key)(None, moved)

    # ------------------------------------------------------------------------------------------ lifecycle

    @on_owner_thread
    def tick(self, group: RaftGroup) -> None:
        """Expire sessions and end rebalances that waited long enough (every ~100 ms on the leader). A new
        leader loads every recorded group once current, so members that died meanwhile expire too."""
        if not group.is_leader or not self._replica.current:
            return
        now = self._clock()
        for name in self._replica.records.groups.keys() - self._slots.keys():
            self._slot(name, now)
        for name, slot in list(self._slots.items()):
            if slot.coordinator.state is g.GroupState.DEAD:
                if not slot.steps:
                    del self._slots[name]  # deleted: a later request rebuilds it from the records
                continue
            try:
                outcome = slot.coordinator.tick(now)
            except g.GroupCoordinatorError as exc:  # a bug in one group fails that group only
                self._fail(name, f"the coordinator of group {name!r} failed: {exc}")
                continue
            if outcome.records or outcome.deferred:
                self._carry_out(group, name, outcome, None, "tick")

    @on_owner_thread
    def unload_all(self, why: str) -> None:
        """This node no longer leads the partition: every coordinator goes, every waiter is told so."""
        for name in list(self._slots):
            self._fail(name, why)
        for key in list(self._parked):
            self._parked.pop(key)(None, CoordinatorMovedError(why))
