"""The coordinator of one consumer group: Kafka's classic group protocol as a sans-IO state machine.

The driver (the gRPC servicers, later a Kafka JoinGroup/SyncGroup/Heartbeat/LeaveGroup front door) calls
:meth:`GroupCoordinator.join`, :meth:`~GroupCoordinator.sync`, :meth:`~GroupCoordinator.heartbeat`,
:meth:`~GroupCoordinator.leave` and :meth:`~GroupCoordinator.tick` with the time; each returns an
:class:`~multiraft.consumer_groups.Outcome` saying what to persist and whom to answer. Nothing here reads a clock or
draws random numbers: member ids come from an injected factory. docs/architecture.md draws the transitions.

Assignment is client-side, as in Kafka: the leader member computes it (with :mod:`.assignors`) and sends it
in its SyncGroup. The coordinator checks it: no partition goes to two members of one generation, and under a
cooperative protocol no partition goes to a new owner while its previous owner (still a member) holds it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ._member import Member
from ._model import (
    GroupMetadataRecord,
    GroupRecord,
    GroupSettings,
    GroupState,
    GroupTombstone,
    HeartbeatReply,
    HeartbeatRequest,
    JoinReply,
    JoinRequest,
    LeaveReply,
    LeaveRequest,
    MemberSubscription,
    Outcome,
    Reply,
    Subscription,
    SyncReply,
    SyncRequest,
    TopicPartition,
)
from .assignors import COOPERATIVE_ASSIGNORS
from .errors import (
    FencedInstanceIdError,
    GroupCoordinatorError,
    GroupDeadError,
    GroupMaxSizeReachedError,
    IllegalAssignmentError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

__all__ = ["GroupCoordinator", "MemberIdFactory"]

MemberIdFactory = Callable[[str], str]  # client id -> a member id never handed out before (Kafka: client-UUID)


@dataclass
class GroupCoordinator:
    """State of one group on the coordinator (the leader of its ``__consumer_offsets`` partition)."""

    group_id: str
    new_member_id: MemberIdFactory
    settings: GroupSettings = field(default_factory=GroupSettings)
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    _members: dict[str, Member] = field(default_factory=dict)  # in join order
    _instances: dict[str, str] = field(default_factory=dict)  # static group_instance_id -> member id
    _pending: dict[str, int] = field(default_factory=dict)  # ids handed out by MEMBER_ID_REQUIRED -> expiry
    _rebalance_deadline_ms: int = 0
    _initial_deadline_ms: int | None = None
    _sync_deadline_ms: int = 0
    _absent: frozenset[str] = frozenset()  # static members that did not rejoin for this generation

    def __post_init__(self) -> None:
        self.settings.validate()

    # ------------------------------------------------------------------------------------------- views

    @property
    def member_ids(self) -> tuple[str, ...]:
        return tuple(self._members)

    def member_of_instance(self, instance_id: str) -> str | None:
        return self._instances.get(instance_id)

    def assignment_of(self, member_id: str) -> frozenset[TopicPartition]:
        member = self._members.get(member_id)
        return member.assignment if member else frozenset()

    def committable_by(self, member_id: str) -> frozenset[TopicPartition]:
        """Partitions whose offsets ``member_id`` may commit: its assignment, and those it is revoking (held
        in the previous generation, given to no one in this one)."""
        member = self._members.get(member_id)
        return member.assignment | member.revoking if member else frozenset()

    def snapshot(self, now_ms: int) -> GroupMetadataRecord:
        """The group as a replicated record (also what ``describe`` shows)."""
        return GroupMetadataRecord(
            self.group_id,
            self.generation,
            self.state,
            self.protocol_type,
            self.protocol_name,
            self.leader_id,
            tuple(m.record() for m in self._members.values()),
            now_ms,
        )

    # ------------------------------------------------------------------------------------ replication

    @classmethod
    def from_records(
        cls,
        group_id: str,
        records: Iterable[GroupRecord],
        new_member_id: MemberIdFactory,
        now_ms: int,
        settings: GroupSettings | None = None,
    ) -> GroupCoordinator | None:
        """Rebuild a group on a new coordinator from its replicated records (the last one wins); None if the
        last one is a tombstone or there is none. Every member gets a full session timeout from ``now_ms``."""
        last: GroupRecord | None = None
        for record in records:
            if record.group_id == group_id:
                last = record
        if not isinstance(last, GroupMetadataRecord):
            return None
        group = cls(group_id, new_member_id, settings or GroupSettings())
        group.state, group.generation = last.state, last.generation
        group.protocol_type, group.protocol_name, group.leader_id = (
            last.protocol_type,
            last.protocol_name,
            last.leader_id,
        )
        for m in last.members:
            member = Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                m.protocols,
                m.subscription,
                m.assignment,
                m.revoking,
                # The record was written when the leader synced: the member may have received its assignment
                # since, or not. Assume it holds either (a rejoin claiming less lets the rest go).
                m.delivered | m.assignment,
                heartbeat_deadline_ms=now_ms + m.session_timeout_ms,
                synced=True,
            )
            group._members[m.member_id] = member
            if m.group_instance_id is not None:
                group._instances[m.group_instance_id] = m.member_id
        return group

    def _record(self, now_ms: int) -> tuple[GroupRecord, ...]:
        return (self.snapshot(now_ms),)

    # ------------------------------------------------------------------------------------------- join

    def join(self, request: JoinRequest, now_ms: int) -> Outcome:
        refusal = self._check_join(request)
        if refusal is not None:
            return Outcome(reply=JoinReply(request.member_id, error=refusal))
        if not request.member_id:
            if request.group_instance_id is not None:
                return self._join_static_unknown(request, now_ms)
            if self._full():
                return Outcome(reply=JoinReply("", error=GroupMaxSizeReachedError(self._full_message())))
            member_id = self.new_member_id(request.client_id)
            self._pending[member_id] = now_ms + request.session_timeout_ms
            return Outcome(reply=JoinReply(member_id, error=MemberIdRequiredError(self.group_id, member_id)))
        if request.member_id in self._pending:
            del self._pending[request.member_id]
            return self._add_member(request.member_id, request, now_ms)
        fenced = self._fenced(request.member_id, request.group_instance_id)
        if fenced is not None:
            return Outcome(reply=JoinReply(request.member_id, error=fenced))
        member = self._members[request.member_id]
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        unchanged = member.matches(request)
        if self.state is GroupState.COMPLETING_REBALANCE and unchanged:
            return Outcome(reply=self._join_reply(member))  # a retry: same generation, same answer
        if self.state is GroupState.STABLE and unchanged and member.member_id != self.leader_id:
            return Outcome(reply=self._join_reply(member))
        member.update(request)
        return self._park_join(member, now_ms)

    def _check_join(self, request: JoinRequest) -> GroupCoordinatorError | None:
        if self.state is GroupState.DEAD:
            return GroupDeadError(f"group {self.group_id!r} is dead")
        settings = self.settings
        if not settings.min_session_timeout_ms <= request.session_timeout_ms <= settings.max_session_timeout_ms:
            return InvalidSessionTimeoutError(
                f"session timeout {request.session_timeout_ms} ms is outside "
                f"[{settings.min_session_timeout_ms}, {settings.max_session_timeout_ms}]"
            )
        if request.rebalance_timeout_ms < 1:
            return InvalidSessionTimeoutError(f"rebalance timeout {request.rebalance_timeout_ms} ms is below 1")
        if not request.protocols:
            return InconsistentGroupProtocolError("the member supports no protocol")
        others = [m for m in self._members.values() if m.member_id != request.member_id]
        if others and request.protocol_type != self.protocol_type:
            return InconsistentGroupProtocolError(
                f"group {self.group_id!r} has protocol type {self.protocol_type!r}, not {request.protocol_type!r}"
            )
        if others and not set(request.protocols) & self._common_protocols(others):
            return InconsistentGroupProtocolError(
                f"group {self.group_id!r} shares no protocol with {list(request.protocols)}"
            )
        return None

    def _join_static_unknown(self, request: JoinRequest, now_ms: int) -> Outcome:
        assert request.group_instance_id is not None
        old_id = self._instances.get(request.group_instance_id)
        member_id = self.new_member_id(request.client_id)
        if old_id is None:
            if self._full():
                return Outcome(reply=JoinReply("", error=GroupMaxSizeReachedError(self._full_message())))
            return self._add_member(member_id, request, now_ms)
        # A restarted static member takes over its old identity; the old member id is fenced from now on.
        old = self._members.pop(old_id)
        fenced = FencedInstanceIdError(self.group_id, request.group_instance_id, old_id)
        deferred = self._answer_parked(old, fenced)
        member = replace(old, member_id=member_id, awaiting_join=False, awaiting_sync=False)
        self._members[member_id] = member
        self._instances[request.group_instance_id] = member_id
        if self.leader_id == old_id:
            self.leader_id = member_id
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        if self.state is GroupState.STABLE and member.same_interest(request):
            member.update(request)
            reply = self._join_reply(member, skip_assignment=member_id == self.leader_id)
            return Outcome(reply=reply, deferred=deferred, records=self._record(now_ms))
        member.update(request)
        outcome = self._park_join(member, now_ms)
        return replace(outcome, deferred=deferred + outcome.deferred)

    def _add_member(self, member_id: str, request: JoinRequest, now_ms: int) -> Outcome:
        if not self._members:
            self.protocol_type = request.protocol_type
        member = Member(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocols,
            request.subscription,
            heartbeat_deadline_ms=now_ms + request.session_timeout_ms,
        )
        self._members[member_id] = member
        if request.group_instance_id is not None:
            self._instances[request.group_instance_id] = member_id
        if self._initial_deadline_ms is not None:  # a fleet is still arriving: wait for the rest of it
            self._initial_deadline_ms = min(
                now_ms + self.settings.initial_rebalance_delay_ms, self._rebalance_deadline_ms
            )
        return self._park_join(member, now_ms)

    def _park_join(self, member: Member, now_ms: int) -> Outcome:
        member.awaiting_join = True
        deferred: tuple[Reply, ...] = ()
        if self.state is not GroupState.PREPARING_REBALANCE:
            deferred = self._prepare_rebalance(now_ms)
        deferred += self._maybe_complete_join(now_ms)
        return self._answer_caller(member.member_id, JoinReply, deferred)

    def _join_reply(self, member: Member, skip_assignment: bool = False) -> JoinReply:
        leader = member.member_id == self.leader_id
        members = tuple(
            MemberSubscription(m.member_id, m.instance_id, self._subscription_for_leader(m))
            for m in self._members.values()
        )
        return JoinReply(
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader_id,
            skip_assignment,
            members if leader else (),
        )

    def _subscription_for_leader(self, member: Member) -> Subscription:
        if member.member_id not in self._absent:
            return member.subscription
        # An absent static member cannot tell the leader what it holds: the coordinator knows, so that a
        # sticky assignor keeps its partitions waiting for it.
        return replace(member.subscription, owned=member.delivered, owned_generation=self.generation - 1)

    # ------------------------------------------------------------------------------------------- sync

    def sync(self, request: SyncRequest, now_ms: int) -> Outcome:
        refusal = self._check_member_request(request.member_id, request.group_instance_id, request.generation)
        if refusal is None and (
            (request.protocol_type is not None and request.protocol_type != self.protocol_type)
            or (request.protocol_name is not None and request.protocol_name != self.protocol_name)
        ):
            refusal = InconsistentGroupProtocolError(
                f"group {self.group_id!r} runs {self.protocol_type}/{self.protocol_name}, "
                f"not {request.protocol_type}/{request.protocol_name}"
            )
        if refusal is None and self.state is GroupState.PREPARING_REBALANCE:
            refusal = RebalanceInProgressError(f"group {self.group_id!r} is rebalancing: join again")
        if refusal is not None:
            return Outcome(reply=SyncReply(request.member_id, error=refusal))
        member = self._members[request.member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        member.synced = True
        if self.state is GroupState.STABLE:
            return Outcome(reply=self._deliver(member))
        member.awaiting_sync = True
        if member.member_id != self.leader_id:
            return Outcome(parked_as=member.member_id)
        assignments = {mid: parts for mid, parts in request.assignments if mid in self._members}
        illegal = self._illegal_assignment(assignments)
        if illegal is not None:
            member.awaiting_sync = False
            deferred = self._prepare_rebalance(now_ms)
            return Outcome(reply=SyncReply(member.member_id, error=illegal), deferred=deferred)
        assigned = self._assigned(assignments.values())
        for m in self._members.values():
            m.assignment = assignments.get(m.member_id, frozenset())
            m.revoking -= assigned  # it has a new owner now: the old one may no longer commit it
        self.state = GroupState.STABLE
        deferred = tuple(self._deliver(m) for m in self._members.values() if m.awaiting_sync)
        for m in self._members.values():
            m.awaiting_sync = False
        return self._answer_caller(member.member_id, SyncReply, deferred, self._record(now_ms))

    def _illegal_assignment(self, assignments: dict[str, frozenset[TopicPartition]]) -> IllegalAssignmentError | None:
        owner: dict[TopicPartition, str] = {}
        for member_id, partitions in assignments.items():
            for tp in partitions:
                if tp in owner:
                    return IllegalAssignmentError(
                        f"{tp[0]}/{tp[1]} is assigned to both {owner[tp]!r} and {member_id!r} in generation "
                        f"{self.generation}"
                    )
                owner[tp] = member_id
        if self.protocol_name not in COOPERATIVE_ASSIGNORS:
            return None  # eager: every member gave up all it held before joining
        for holder in self._members.values():
            for tp in holder.delivered:
                if owner.get(tp, holder.member_id) != holder.member_id:
                    return IllegalAssignmentError(
                        f"{tp[0]}/{tp[1]} goes to {owner[tp]!r} while {holder.member_id!r} still holds it: "
                        "a cooperative move revokes in one generation and assigns in the next"
                    )
        return None

    def _deliver(self, member: Member) -> SyncReply:
        """Answer a SyncGroup with the member's assignment. What it held and no longer gets it is revoking:
        it may still commit those offsets (in its ``on_revoke``) until another member is given them."""
        assigned = self._assigned(m.assignment for m in self._members.values())
        member.revoking = (member.revoking | (member.delivered - member.assignment)) - assigned
        member.delivered = member.assignment
        return SyncReply(member.member_id, self.generation, self.protocol_type, self.protocol_name, member.assignment)

    @staticmethod
    def _assigned(assignments: Iterable[frozenset[TopicPartition]]) -> frozenset[TopicPartition]:
        return frozenset().union(*assignments)

    # ------------------------------------------------------------------------------- heartbeat, leave

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> Outcome:
        refusal = self._check_member_request(request.member_id, request.group_instance_id, request.generation)
        if refusal is None:
            member = self._members[request.member_id]
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            if self.state is GroupState.PREPARING_REBALANCE:
                refusal = RebalanceInProgressError(f"group {self.group_id!r} is rebalancing: join again")
        return Outcome(reply=HeartbeatReply(request.member_id, refusal))

    def leave(self, request: LeaveRequest, now_ms: int) -> Outcome:
        """LeaveGroup. A static member may be removed by its instance id alone (an empty member id)."""
        if self.state is GroupState.DEAD:
            return Outcome(reply=LeaveReply(request.member_id, GroupDeadError(f"group {self.group_id!r} is dead")))
        if request.group_instance_id is None and request.member_id in self._pending:
            del self._pending[request.member_id]
            return Outcome(reply=LeaveReply(request.member_id), deferred=self._maybe_complete_join(now_ms))
        member_id = request.member_id
        if request.group_instance_id is not None and not member_id:
            member_id = self._instances.get(request.group_instance_id, "")
        refusal = self._fenced(member_id, request.group_instance_id)
        if refusal is not None:
            return Outcome(reply=LeaveReply(request.member_id, refusal))
        deferred, records = self._remove(member_id, now_ms)
        return Outcome(reply=LeaveReply(request.member_id), deferred=deferred, records=records)

    # -------------------------------------------------------------------------------- time and admin

    def tick(self, now_ms: int) -> Outcome:
        """Expire members whose session ran out and rebalances that ran out of time."""
        if self.state is GroupState.DEAD:
            return Outcome()
        was_empty = self.state is GroupState.EMPTY
        for member_id, expiry in list(self._pending.items()):
            if expiry <= now_ms:
                del self._pending[member_id]
        # A parked request keeps its member alive: the rebalance timeout bounds it instead.
        expired = [
            m.member_id
            for m in self._members.values()
            if not (m.awaiting_join or m.awaiting_sync) and m.heartbeat_deadline_ms <= now_ms
        ]
        if self.state is GroupState.COMPLETING_REBALANCE and self._sync_deadline_ms <= now_ms:
            expired += [m.member_id for m in self._members.values() if not m.synced and m.member_id not in expired]
        deferred: tuple[Reply, ...] = ()
        for member_id in expired:
            deferred += self._drop(member_id)
        if expired and self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            deferred += self._prepare_rebalance(now_ms)
        deferred += self._maybe_complete_join(now_ms)
        emptied = not was_empty and self._is_empty()
        return Outcome(deferred=deferred, records=self._record(now_ms) if emptied else ())

    def _is_empty(self) -> bool:
        return self.state is GroupState.EMPTY

    def delete(self) -> Outcome:
        """Delete an empty group: it is Dead here, and its tombstone is replicated."""
        if self.state is GroupState.DEAD:
            raise GroupDeadError(f"group {self.group_id!r} is dead")
        if self._members:
            raise NonEmptyGroupError(f"group {self.group_id!r} has {len(self._members)} member(s)")
        self.state = GroupState.DEAD
        return Outcome(records=(GroupTombstone(self.group_id),))

    def unload(self) -> Outcome:
        """This node stopped coordinating the group (it lost the partition's leadership): every parked
        request is told to find the new coordinator."""
        dead = GroupDeadError(f"group {self.group_id!r} moved to another coordinator")
        deferred: tuple[Reply, ...] = ()
        for member in self._members.values():
            deferred += self._answer_parked(member, dead)
        self.state = GroupState.DEAD
        return Outcome(deferred=deferred)

    # ---------------------------------------------------------------------------------- rebalancing

    def _prepare_rebalance(self, now_ms: int) -> tuple[Reply, ...]:
        deferred: tuple[Reply, ...] = ()
        if self.state is GroupState.COMPLETING_REBALANCE:
            retry = RebalanceInProgressError(f"group {self.group_id!r} is rebalancing again: join again")
            for member in self._members.values():
                if member.awaiting_sync:
                    deferred += (SyncReply(member.member_id, error=retry),)
                    member.awaiting_sync = False
        timeout = max((m.rebalance_timeout_ms for m in self._members.values()), default=0)
        self._rebalance_deadline_ms = now_ms + timeout
        self._initial_deadline_ms = None
        if self.state is GroupState.EMPTY:
            delay = min(self.settings.initial_rebalance_delay_ms, timeout)
            self._initial_deadline_ms = now_ms + delay
        self.state = GroupState.PREPARING_REBALANCE
        return deferred

    def _maybe_complete_join(self, now_ms: int) -> tuple[Reply, ...]:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return ()
        everyone = all(m.awaiting_join for m in self._members.values()) and not self._pending
        waited = self._initial_deadline_ms is None or self._initial_deadline_ms <= now_ms
        if not (everyone and waited) and now_ms < self._rebalance_deadline_ms:
            return ()
        deferred: tuple[Reply, ...] = ()
        for member in list(self._members.values()):
            # Dynamic members that did not rejoin in time are gone; static ones keep their place until their
            # session times out, so that a restarting instance finds its partitions waiting.
            if not member.awaiting_join and member.instance_id is None:
                deferred += self._drop(member.member_id)
        self._pending.clear()
        self._initial_deadline_ms = None
        joined = [m for m in self._members.values() if m.awaiting_join]
        if not joined and self._members:
            # Only absent static members are left: wait for them until they rejoin or their sessions end.
            timeout = max(m.rebalance_timeout_ms for m in self._members.values())
            self._rebalance_deadline_ms = now_ms + timeout
            return deferred
        self.generation += 1
        if not joined:
            self.state, self.protocol_name, self.leader_id = GroupState.EMPTY, None, ""
            return deferred
        self._absent = frozenset(m.member_id for m in self._members.values() if not m.awaiting_join)
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self._members or not self._members[self.leader_id].awaiting_join:
            self.leader_id = joined[0].member_id
        self.state = GroupState.COMPLETING_REBALANCE
        self._sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self._members.values())
        for member in self._members.values():
            member.synced = not member.awaiting_join  # an absent static member is not waited for
        for member in joined:
            member.awaiting_join = False
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            deferred += (self._join_reply(member),)
        return deferred

    def _select_protocol(self) -> str:
        members = list(self._members.values())
        candidates = self._common_protocols(members)
        votes = Counter(next(p for p in m.protocols if p in candidates) for m in members)
        return min(votes, key=lambda p: (-votes[p], p))

    @staticmethod
    def _common_protocols(members: Iterable[Member]) -> set[str]:
        common: set[str] | None = None
        for member in members:
            common = set(member.protocols) if common is None else common & set(member.protocols)
        return common or set()

    # ------------------------------------------------------------------------------------- helpers

    def _remove(self, member_id: str, now_ms: int) -> tuple[tuple[Reply, ...], tuple[GroupRecord, ...]]:
        deferred = self._drop(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            deferred += self._prepare_rebalance(now_ms)
        deferred += self._maybe_complete_join(now_ms)
        records = self._record(now_ms) if self.state is GroupState.EMPTY else ()
        return deferred, records

    def _drop(self, member_id: str) -> tuple[Reply, ...]:
        member = self._members.pop(member_id)
        if member.instance_id is not None and self._instances.get(member.instance_id) == member_id:
            del self._instances[member.instance_id]
        if self.leader_id == member_id:
            self.leader_id = ""
        return self._answer_parked(member, UnknownMemberIdError(self.group_id, member_id))

    @staticmethod
    def _answer_parked(member: Member, error: GroupCoordinatorError) -> tuple[Reply, ...]:
        deferred: tuple[Reply, ...] = ()
        if member.awaiting_join:
            deferred += (JoinReply(member.member_id, error=error),)
        if member.awaiting_sync:
            deferred += (SyncReply(member.member_id, error=error),)
        member.awaiting_join = member.awaiting_sync = False
        return deferred

    def _fenced(self, member_id: str, instance_id: str | None) -> GroupCoordinatorError | None:
        if instance_id is not None:
            holder = self._instances.get(instance_id)
            if holder is None:
                return UnknownMemberIdError(self.group_id, member_id)
            if holder != member_id:
                return FencedInstanceIdError(self.group_id, instance_id, member_id)
        if member_id not in self._members:
            return UnknownMemberIdError(self.group_id, member_id)
        return None

    def _check_member_request(
        self, member_id: str, instance_id: str | None, generation: int
    ) -> GroupCoordinatorError | None:
        if self.state is GroupState.DEAD:
            return GroupDeadError(f"group {self.group_id!r} is dead")
        fenced = self._fenced(member_id, instance_id)
        if fenced is not None:
            return fenced
        if generation != self.generation:
            return IllegalGenerationError(self.group_id, generation, self.generation)
        return None

    def _full(self) -> bool:
        return len(self._members) + len(self._pending) >= self.settings.max_group_size

    def _full_message(self) -> str:
        return f"group {self.group_id!r} has reached its {self.settings.max_group_size} members"

    @staticmethod
    def _answer_caller(
        caller: str,
        kind: type[JoinReply] | type[SyncReply],
        deferred: tuple[Reply, ...],
        records: tuple[GroupRecord, ...] = (),
    ) -> Outcome:
        mine = [r for r in deferred if isinstance(r, kind) and r.member_id == caller]
        others = tuple(r for r in deferred if not (isinstance(r, kind) and r.member_id == caller))
        if mine:
            return Outcome(reply=mine[0], deferred=others, records=records)
        return Outcome(deferred=others, records=records, parked_as=caller)
