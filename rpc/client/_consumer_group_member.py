"""A consumer's membership in its group: Kafka's consumer-side group protocol, driven by ``poll()``.

The member joins (a first JoinGroup is answered MEMBER_ID_REQUIRED with its id: it joins again with it),
then syncs: the leader computes every member's assignment with :func:`multiraft.consumer_groups.assign_for_leader`
from the topics' metadata; each member receives its own. A heartbeat thread
(:mod:`rpc.client._consumer_group_heartbeat`) keeps the membership alive and says when to rejoin.

Cooperative protocol (``cooperative-sticky``, KIP-429): the member joins with the partitions it owns and keeps
reading them while the group rebalances; the new assignment revokes only those that move (``on_revoke``) and
the member rejoins at once so that the next generation can give them to their new owners. Eager protocols
(``range``, ``roundrobin``, ``sticky``) revoke every partition before joining.

Everything that touches the partitions or the user's callbacks runs on the caller's thread in :meth:`poll`
(or :meth:`close`); the heartbeat thread only raises flags under ``_lock``, and the long-poll calls hand back
futures that wake the consumer when they complete.
"""

from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Protocol

from multiraft.consumer_groups import (
    COOPERATIVE_ASSIGNORS,
    NO_GENERATION,
    HeartbeatRequest,
    JoinReply,
    JoinRequest,
    LeaveRequest,
    Subscription,
    SyncReply,
    SyncRequest,
    TopicRacks,
    assign_for_leader,
)
from multiraft.consumer_groups import (
    TopicPartition as GroupPartition,
)
from multiraft.errors import (
    GroupRebalancingError,
    InstanceFencedError,
    InvalidGroupAssignmentError,
    MemberFencedError,
    MemberIdAssignedError,
    MultiraftError,
    PartitionNotAssignedError,
    StaleGenerationError,
    UnknownMemberError,
)
from multiraft.logging import get_logger
from rpc.client._consumer_group_link import GroupLink
from rpc.client._consumer_group_settings import MemberSettings
from rpc.client._records import TopicPartition

__all__ = ["GroupMembership", "PartitionListener", "Phase"]

log = get_logger(__name__)

_RETRY_BACKOFF_START_S = 0.1
_RETRY_BACKOFF_MAX_S = 2.0
_STEPS_PER_POLL = 8  # join/sync answers handled in one poll (MEMBER_ID_REQUIRED, then join, then sync...)


class PartitionListener(Protocol):
    """The consumer side of a rebalance (run on the caller's thread, in this order per rebalance)."""

    def revoking(self, partitions: list[TopicPartition]) -> None:
        """Run ``on_revoke`` (commits may still go through), then stop reading ``partitions``."""

    def lost(self, partitions: list[TopicPartition]) -> None:
        """Run ``on_lost``: they already belong to someone else; then stop reading them."""

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """Start reading ``partitions``, then run ``on_assign`` (called after every rebalance, maybe empty)."""


class Phase(enum.Enum):
    UNJOINED = "unjoined"  # must (re)join: at the first poll, after a refusal, after losing the membership
    JOINING = "joining"  # a JoinGroup is in flight
    SYNCING = "syncing"  # a SyncGroup is in flight
    STABLE = "stable"
    FENCED = "fenced"  # a newer process took the static instance id: stopped for good
    CLOSED = "closed"


class GroupMembership:
    """The member's state machine. ``topics`` reads the cluster's topics as ``TopicRacks`` (every topic);
    ``wake`` tells the consumer's poll loop that an answer arrived."""

    def __init__(
        self,
        settings: MemberSettings,
        link: GroupLink,
        listener: PartitionListener,
        topics: Callable[[], TopicRacks],
        *,
        wake: Callable[[], None] = lambda: None,
        metadata_max_age_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings.validate()
        self.settings = settings
        self._link = link
        self._listener = listener
        self._topics_source = topics
        self._wake = wake
        self._metadata_max_age_s = metadata_max_age_s
        self._clock = clock
        self._lock = threading.Lock()  # guards what the heartbeat thread reads and the flags it raises
        self._phase = Phase.UNJOINED
        self._member_id = ""
        self._generation = NO_GENERATION
        self._protocol: str | None = None
        self._owned: frozenset[TopicPartition] = frozenset()
        self._owned_generation = NO_GENERATION
        self._held_before_revoking: frozenset[TopicPartition] = frozenset()  # eager sticky's claim
        self._subscription: tuple[str, ...] | re.Pattern[str] = ()
        self._topics: tuple[str, ...] = ()  # what the member subscribes to now (a pattern's matches)
        self._assigned_counts: dict[str, int] | None = None  # partition counts the leader assigned from
        self._next_metadata_check = 0.0
        self._rejoin_needed = True
        self._lost_reason: MemberFencedError | None = None  # raised by the heartbeat thread or a commit
        self._left_for_poll_timeout = False
        self._last_poll = clock()
        self._retry_at = 0.0
        self._retry_backoff_s = _RETRY_BACKOFF_START_S
        self._join_future: Future[JoinReply] | None = None
        self._sync_future: Future[SyncReply] | None = None

    # ------------------------------------------------------------------------------------------- views

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def owned(self) -> frozenset[TopicPartition]:
        return self._owned

    @property
    def rejoin_needed(self) -> bool:
        return self._rejoin_needed

    @property
    def retry_at(self) -> float:
        """When a refused join may be tried again (the consumer's poll loop wakes up for it)."""
        return self._retry_at

    @property
    def cooperative(self) -> bool:
        return self.settings.cooperative

    @property
    def is_static(self) -> bool:
        return self.settings.group_instance_id is not None

    # ------------------------------------------------------------------------------------ subscription

    def subscribe(self, topics: tuple[str, ...] | re.Pattern[str]) -> None:
        """Read ``topics`` (or every topic a pattern matches): join, or rejoin with the new subscription."""
        self._subscription = topics
        self._next_metadata_check = 0.0
        self._topics = topics if isinstance(topics, tuple) else ()
        with self._lock:
            self._rejoin_needed = True

    def _check_metadata(self, now: float) -> None:
        """Every ``metadata_max_age_s``: a pattern's matches changed, or (the leader) a topic's partition count
        changed since it assigned: rejoin, so that the leader assigns again (Kafka does the same)."""
        if now < self._next_metadata_check:
            return
        self._next_metadata_check = now + self._metadata_max_age_s
        try:
            topics = self._topics_source()
        except MultiraftError as exc:
            log.debug("metadata refresh failed; keeping the subscription", error=str(exc))
            return
        if isinstance(self._subscription, re.Pattern):
            pattern = self._subscription
            matched = tuple(sorted(t for t in topics if not t.startswith("__") and pattern.fullmatch(t)))
            if matched != self._topics:
                log.info("the pattern matches other topics now; rejoining", topics=list(matched))
                self._topics = matched
                self._request_rejoin()
        counts = self._assigned_counts
        if counts is not None and {t: len(topics.get(t, ())) for t in counts} != counts:
            log.info("a subscribed topic's partitions changed; rejoining to reassign")
            self._request_rejoin()

    def _request_rejoin(self) -> None:
        with self._lock:
            self._rejoin_needed = True

    # -------------------------------------------------------------------------------------------- poll

    def poll(self) -> None:
        """Drive the membership (never waits for the coordinator): act on what the heartbeat thread saw, on
        JoinGroup/SyncGroup answers, and start a (re)join when one is needed. May run callbacks; raises
        refusals the application must see (InstanceFencedError, misconfiguration)."""
        now = self._clock()
        self._last_poll = now
        if self._phase is Phase.CLOSED:
            return
        self._take_signals()
        if self._phase is Phase.FENCED:
            raise InstanceFencedError(
                f"a newer consumer holds group instance {self.settings.group_instance_id!r}; this one stopped"
            )
        self._check_metadata(now)
        for _ in range(_STEPS_PER_POLL):
            if not self._step(now):
                return

    def _take_signals(self) -> None:
        with self._lock:
            lost, self._lost_reason = self._lost_reason, None
            left, self._left_for_poll_timeout = self._left_for_poll_timeout, False
        if left:
            self._lose("left the group after max_poll_interval_s without a poll()", forget_id=True)
        elif lost is not None:
            self._on_fenced(lost)

    def _step(self, now: float) -> bool:
        """One transition; False when there is nothing more to do in this poll."""
        if self._phase is Phase.JOINING:
            assert self._join_future is not None
            if not self._join_future.done():
                return False
            future, self._join_future = self._join_future, None
            self._joined(future)
            return True
        if self._phase is Phase.SYNCING:
            assert self._sync_future is not None
            if not self._sync_future.done():
                return False
            sync, self._sync_future = self._sync_future, None
            self._synced(sync)
            return True
        if self._phase is Phase.STABLE and not self._rejoin_needed:
            return False
        if self._phase in (Phase.FENCED, Phase.CLOSED) or now < self._retry_at:
            return False
        self._start_join()
        return True

    def _start_join(self) -> None:
        if not self.cooperative and self._owned:
            self._held_before_revoking = self._owned
            self._revoke(self._owned)  # eager: every partition goes back before the member joins
        if self.cooperative:
            claim, claim_generation = self._owned, self._owned_generation
        elif self.settings.partition_assignment_strategy[0] == "sticky":
            claim, claim_generation = self._held_before_revoking, self._owned_generation
        else:
            claim, claim_generation = frozenset(), NO_GENERATION
        request = JoinRequest(
            member_id=self._member_id,
            session_timeout_ms=self.settings.session_timeout_ms,
            rebalance_timeout_ms=self.settings.rebalance_timeout_ms,
            protocols=self.settings.partition_assignment_strategy,
            subscription=Subscription(
                self._topics, frozenset(claim), claim_generation if claim else NO_GENERATION, self.settings.client_rack
            ),
            group_instance_id=self.settings.group_instance_id,
            client_id=self.settings.client_id,
        )
        with self._lock:
            self._rejoin_needed = False
            self._phase = Phase.JOINING
        log.debug("joining", group=self.settings.group_id, member_id=self._member_id, owned=len(claim))
        self._join_future = self._link.join(request)
        self._join_future.add_done_callback(lambda _f: self._wake())

    def _joined(self, future: Future[JoinReply]) -> None:
        try:
            reply = future.result()
        except MemberIdAssignedError as exc:
            self._member_id = exc.member_id  # KIP-394: join again (this very poll) with the id handed out
            self._set_phase(Phase.UNJOINED, rejoin=True)
            return
        except MultiraftError as exc:
            self._refused("JoinGroup", exc)
            return
        assignments: tuple[tuple[str, frozenset[GroupPartition]], ...] = ()
        if reply.member_id == reply.leader_id and not reply.skip_assignment:
            try:
                assignments = self._assign(reply)
            except MultiraftError as exc:  # no metadata: join again (the same generation answers again)
                self._refused("JoinGroup", exc)
                return
        elif reply.member_id != reply.leader_id:
            self._assigned_counts = None  # watching partition counts is the leader's job
        with self._lock:
            self._member_id = reply.member_id
            self._protocol = reply.protocol_name
        request = SyncRequest(
            member_id=reply.member_id,
            generation=reply.generation,
            assignments=assignments,
            group_instance_id=self.settings.group_instance_id,
            protocol_type=reply.protocol_type,
            protocol_name=reply.protocol_name,
        )
        self._set_phase(Phase.SYNCING)
        self._sync_future = self._link.sync(request)
        self._sync_future.add_done_callback(lambda _f: self._wake())

    def _assign(self, reply: JoinReply) -> tuple[tuple[str, frozenset[GroupPartition]], ...]:
        """The leader's part: every member's partitions, from fresh metadata of the topics they subscribe."""
        everything = self._topics_source()
        wanted = {t for m in reply.members for t in m.subscription.topics}
        topics = {t: racks for t, racks in everything.items() if t in wanted}
        self._assigned_counts = {t: len(topics.get(t, ())) for t in wanted}
        plan = assign_for_leader(reply, topics)
        log.info(
            "assigned the group's partitions",
            group=self.settings.group_id,
            generation=reply.generation,
            protocol=reply.protocol_name,
            members={m: len(p) for m, p in plan},
        )
        return plan

    def _synced(self, future: Future[SyncReply]) -> None:
        try:
            reply = future.result()
        except MultiraftError as exc:
            self._refused("SyncGroup", exc)
            return
        assigned = frozenset(TopicPartition(t, p) for t, p in reply.assignment)
        cooperative = (reply.protocol_name or self._protocol) in COOPERATIVE_ASSIGNORS
        revoked = self._owned - assigned if cooperative else frozenset()
        with self._lock:
            self._generation = reply.generation
            self._phase = Phase.STABLE
        self._retry_backoff_s = _RETRY_BACKOFF_START_S
        self._held_before_revoking = frozenset()
        log.info(
            "joined the group",
            group=self.settings.group_id,
            member_id=self._member_id,
            generation=reply.generation,
            assigned=len(assigned),
            revoked=len(revoked),
        )
        added = assigned - self._owned
        try:
            if revoked:
                self._request_rejoin()  # KIP-429: the next generation hands them to their new owners
                self._revoke(revoked)
        finally:  # an exception of on_revoke reaches the caller once the assignment is in place (as Kafka's)
            self._owned, self._owned_generation = assigned, reply.generation
            self._listener.assigned(sorted(added))

    def _refused(self, call: str, exc: MultiraftError) -> None:
        if isinstance(exc, MemberFencedError):
            self._on_fenced(exc)
            if self._phase is Phase.FENCED:
                raise exc
            return
        if isinstance(exc, GroupRebalancingError | InvalidGroupAssignmentError):
            log.debug("the group rebalances again; rejoining", call=call, error=str(exc))
            self._set_phase(Phase.UNJOINED, rejoin=True)
            return
        self._retry_at = self._clock() + self._retry_backoff_s
        self._retry_backoff_s = min(self._retry_backoff_s * 2, _RETRY_BACKOFF_MAX_S)
        self._set_phase(Phase.UNJOINED, rejoin=True)
        if exc.retriable:
            log.info("the coordinator did not answer; joining again", call=call, error=str(exc))
            return
        raise exc  # misconfiguration (protocols, session timeout, a full group, authorization): the caller sees it

    def _on_fenced(self, exc: MemberFencedError) -> None:
        """The membership is gone (session expired, missed a generation, replaced): the partitions are lost."""
        if isinstance(exc, InstanceFencedError):
            self._lose(str(exc), forget_id=True)
            self._set_phase(Phase.FENCED)
            log.error("a newer consumer took this group instance id; stopping", error=str(exc))
            return
        if isinstance(exc, PartitionNotAssignedError):
            self._request_rejoin()  # the member is fine; its view of its partitions is not
            return
        self._lose(str(exc), forget_id=isinstance(exc, UnknownMemberError))

    def _lose(self, why: str, *, forget_id: bool) -> None:
        owned = self._owned
        log.warning("lost the group membership", group=self.settings.group_id, reason=why, partitions=len(owned))
        with self._lock:
            if forget_id:
                self._member_id = ""
            self._generation = NO_GENERATION
            self._phase = Phase.UNJOINED
            self._rejoin_needed = True
        self._owned, self._owned_generation = frozenset(), NO_GENERATION
        self._held_before_revoking = frozenset()
        if owned:
            self._listener.lost(sorted(owned))

    def _revoke(self, partitions: frozenset[TopicPartition]) -> None:
        self._owned -= partitions
        self._listener.revoking(sorted(partitions))

    def _set_phase(self, phase: Phase, *, rejoin: bool = False) -> None:
        with self._lock:
            self._phase = phase
            self._rejoin_needed = self._rejoin_needed or rejoin

    # ----------------------------------------------------------------------------------------- commits

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit as this member of its generation. A refusal is raised precisely; a fenced member also
        loses its partitions at the next poll (a commit during a rebalance leaves that to the rebalance, and
        GroupRebalancingError to the heartbeat: the member may be the one completing it)."""
        with self._lock:
            member_id, generation, phase = self._member_id, self._generation, self._phase
        try:
            self._link.commit(offsets, member_id, generation, self.settings.group_instance_id)
        except MemberFencedError as exc:
            with self._lock:
                if phase is Phase.STABLE and self._generation == generation and self._lost_reason is None:
                    self._lost_reason = exc
            raise

    # ------------------------------------------------------------------------------- heartbeat thread

    def beat(self) -> float:
        """One heartbeat (the heartbeat thread's step): returns how long to wait for the next one. Past
        ``max_poll_interval_s`` without a poll() it leaves the group instead (a static member only stops:
        it keeps its place for its session timeout, as in Kafka); the next poll() rejoins."""
        interval = self.settings.heartbeat_interval_s
        now = self._clock()
        with self._lock:
            if self._phase is not Phase.STABLE or self._lost_reason is not None or self._left_for_poll_timeout:
                return interval
            idle = now - self._last_poll
            expired = idle >= self.settings.max_poll_interval_s
            self._left_for_poll_timeout = expired
            member_id, generation = self._member_id, self._generation
        if expired:
            log.warning(
                "poll() was not called within max_poll_interval_s; leaving the group",
                group=self.settings.group_id,
                max_poll_interval_s=self.settings.max_poll_interval_s,
            )
            if not self.is_static:
                self._leave_quietly(member_id, why="max_poll_interval_s passed without a poll()")
            self._wake()
            return interval
        try:
            self._link.heartbeat(HeartbeatRequest(member_id, generation, self.settings.group_instance_id))
        except GroupRebalancingError:
            self._flag(generation, rejoin=True)
        except (UnknownMemberError, StaleGenerationError, InstanceFencedError) as exc:
            self._flag(generation, lost=exc)
        except MultiraftError as exc:
            log.debug("heartbeat failed; trying again", group=self.settings.group_id, error=str(exc))
        return max(0.001, min(interval, self.settings.max_poll_interval_s - idle))

    def _flag(self, generation: int, *, rejoin: bool = False, lost: MemberFencedError | None = None) -> None:
        with self._lock:
            if self._generation != generation or self._phase is not Phase.STABLE:
                return  # an answer about a generation the member has left behind already
            self._rejoin_needed = self._rejoin_needed or rejoin
            if lost is not None and self._lost_reason is None:
                self._lost_reason = lost
        self._wake()

    # ------------------------------------------------------------------------------------------- close

    def close(self, *, leave: bool = True) -> None:
        """Give the partitions up (``on_revoke``), then leave the group at once when ``leave`` (a static
        member never leaves: it keeps its place for its session timeout, as in Kafka)."""
        if self._phase is Phase.CLOSED:
            return
        owned = self._owned
        self._owned = frozenset()
        with self._lock:
            member_id, phase = self._member_id, self._phase
            self._phase = Phase.CLOSED
        try:
            if owned and phase is not Phase.FENCED:
                self._listener.revoking(sorted(owned))
        finally:
            if leave and member_id and not self.is_static and phase is not Phase.FENCED:
                self._leave_quietly(member_id, why="closed")

    def _leave_quietly(self, member_id: str, *, why: str) -> None:
        try:
            self._link.leave(LeaveRequest(member_id, self.settings.group_instance_id))
            log.info("left the group", group=self.settings.group_id, member_id=member_id, reason=why)
        except MultiraftError as exc:
            log.info("leaving the group failed; the session timeout will end the membership", error=str(exc))


def topic_racks(
    partitions: Mapping[str, Sequence[Sequence[int]]], racks: Mapping[int, str]
) -> dict[str, tuple[frozenset[str], ...]]:
    """``TopicRacks`` from each partition's replica node ids and the nodes' racks (unknown racks left out)."""
    return {
        topic: tuple(frozenset(racks[n] for n in replicas if racks.get(n)) for replicas in per_partition)
        for topic, per_partition in partitions.items()
    }
