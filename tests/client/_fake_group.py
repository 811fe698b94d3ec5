"""An in-process coordinator for membership tests: the real :class:`multiraft.consumer_groups.GroupCoordinator`
behind the client's :class:`~rpc.client._consumer_group_link.GroupLink`, driven on a virtual clock.

A parked JoinGroup/SyncGroup is a future that a later transition completes (as the node's driver does);
refusals become the client's errors (:mod:`multiraft.errors`) by their Kafka reason, as on the wire.
Members are :class:`GroupMembership` objects with a recording listener; tests poll and beat them in turn,
so everything is deterministic and nothing sleeps.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from multiraft.consumer_groups import (
    GroupCoordinator,
    GroupCoordinatorError,
    GroupSettings,
    HeartbeatRequest,
    JoinReply,
    JoinRequest,
    LeaveRequest,
    MemberIdRequiredError,
    Outcome,
    Reply,
    SyncReply,
    SyncRequest,
    check_offset_commit,
    topics_without_racks,
)
from multiraft.errors import MultiraftError, error_for_reason
from rpc.client._consumer_group_member import GroupMembership, Phase
from rpc.client._consumer_group_settings import MemberSettings
from rpc.client._records import TopicPartition


def client_error(error: GroupCoordinatorError) -> MultiraftError:
    metadata = {"member_id": error.member_id} if isinstance(error, MemberIdRequiredError) else {}
    return error_for_reason(error.reason, str(error), metadata)


@dataclass
class FakeCoordinator:
    """The coordinator of group "g" over ``partitions`` (topic -> count); also a :class:`GroupLink`."""

    partitions: dict[str, int]
    settings: GroupSettings = field(
        default_factory=lambda: GroupSettings(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=0)
    )
    now_ms: int = 0
    group: GroupCoordinator = field(init=False)
    parked: dict[tuple[str, type[Any]], Future[Any]] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # generation -> member id -> partitions, as SyncGroup handed them out
    handed_out: dict[int, dict[str, frozenset[tuple[str, int]]]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        numbers = itertools.count(1)
        self.group = GroupCoordinator("g", lambda client_id: f"{client_id}-{next(numbers)}", self.settings)

    # ------------------------------------------------------------------------------------------ link

    def join(self, request: JoinRequest) -> Future[JoinReply]:
        self.calls.append("join")
        future: Future[JoinReply] = Future()
        self._apply(self.group.join(request, self.now_ms), JoinReply, future)
        return future

    def sync(self, request: SyncRequest) -> Future[SyncReply]:
        self.calls.append("sync")
        future: Future[SyncReply] = Future()
        self._apply(self.group.sync(request, self.now_ms), SyncReply, future)
        return future

    def heartbeat(self, request: HeartbeatRequest) -> None:
        self.calls.append("heartbeat")
        reply = self.group.heartbeat(request, self.now_ms).reply
        if reply is not None and reply.error is not None:
            raise client_error(reply.error)

    def leave(self, request: LeaveRequest) -> None:
        self.calls.append("leave")
        outcome = self.group.leave(request, self.now_ms)
        self._deliver(outcome)
        if outcome.reply is not None and outcome.reply.error is not None:
            raise client_error(outcome.reply.error)

    def commit(
        self, offsets: Mapping[TopicPartition, int], member_id: str, generation: int, instance_id: str | None
    ) -> None:
        self.calls.append("commit")
        try:
            check_offset_commit(self.group, member_id, generation, [tuple(tp) for tp in offsets], instance_id)
        except GroupCoordinatorError as exc:
            raise client_error(exc) from exc
        self.offsets.update(offsets)

    # ------------------------------------------------------------------------------------------- time

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self._deliver(self.group.tick(self.now_ms))

    # -------------------------------------------------------------------------------------- internals

    def _apply(self, outcome: Outcome, kind: type[Any], future: Future[Any]) -> None:
        if outcome.reply is not None:
            self._resolve(future, outcome.reply)
        else:
            older = self.parked.pop((outcome.parked_as, kind), None)
            if older is not None:
                older.set_exception(error_for_reason("REBALANCE_IN_PROGRESS", "replaced by a newer request", {}))
            self.parked[(outcome.parked_as, kind)] = future
        self._deliver(outcome)

    def _deliver(self, outcome: Outcome) -> None:
        for reply in outcome.deferred:
            waiting = self.parked.pop((reply.member_id, type(reply)), None)
            if waiting is not None:
                self._resolve(waiting, reply)

    def _resolve(self, future: Future[Any], reply: Reply) -> None:
        if reply.error is not None:
            future.set_exception(client_error(reply.error))
            return
        if isinstance(reply, SyncReply):
            self.handed_out.setdefault(reply.generation, {})[reply.member_id] = reply.assignment
        future.set_result(reply)

    def topics(self) -> dict[str, tuple[frozenset[str], ...]]:
        return topics_without_racks(self.partitions)


@dataclass
class Recorder:
    """A member's listener: what it reads now, and the callbacks in order. ``commit_on_revoke`` commits the
    revoked partitions' positions (offset 7) in ``revoking``, as an application's ``on_revoke`` does."""

    held: set[TopicPartition] = field(default_factory=set)
    events: list[tuple[str, list[TopicPartition]]] = field(default_factory=list)
    member: GroupMembership | None = None
    commit_on_revoke: bool = False
    commit_errors: list[MultiraftError] = field(default_factory=list)

    def revoking(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", partitions))
        if self.commit_on_revoke and self.member is not None:
            try:
                self.member.commit(dict.fromkeys(partitions, 7))
            except MultiraftError as exc:
                self.commit_errors.append(exc)
        self.held -= set(partitions)

    def lost(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("lost", partitions))
        self.held -= set(partitions)

    def assigned(self, partitions: list[TopicPartition]) -> None:
        self.events.append(("assign", partitions))
        self.held |= set(partitions)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Member:
    membership: GroupMembership
    recorder: Recorder
    alive: bool = True


def new_member(
    coordinator: FakeCoordinator,
    clock: Clock,
    *,
    strategy: tuple[str, ...] = ("cooperative-sticky",),
    instance_id: str | None = None,
    topics: tuple[str, ...] | None = None,
    commit_on_revoke: bool = False,
    max_poll_interval_s: float = 300.0,
) -> Member:
    recorder = Recorder(commit_on_revoke=commit_on_revoke)
    settings = MemberSettings(
        "g",
        group_instance_id=instance_id,
        session_timeout_s=10.0,
        heartbeat_interval_s=1.0,
        max_poll_interval_s=max_poll_interval_s,
        partition_assignment_strategy=strategy,
        client_id="c",
    )
    membership = GroupMembership(settings, coordinator, recorder, coordinator.topics, clock=clock)
    recorder.member = membership
    membership.subscribe(topics if topics is not None else tuple(sorted(coordinator.partitions)))
    return Member(membership, recorder)


def assert_no_partition_read_twice(members: list[Member]) -> None:
    seen: dict[TopicPartition, int] = {}
    for index, member in enumerate(members):
        for tp in member.recorder.held:
            assert tp not in seen, f"{tp} is read by members {seen[tp]} and {index} at once"
            seen[tp] = index


def settle(coordinator: FakeCoordinator, members: list[Member], *, rounds: int = 30) -> None:
    """Poll and heartbeat every live member in turn until the group is stable and nobody needs to rejoin,
    checking after every step that no partition is read by two members."""
    live = [m for m in members if m.alive]
    for _ in range(rounds):
        for member in live:
            member.membership.poll()
            assert_no_partition_read_twice(live)
        for member in live:
            member.membership.beat()
        if all(m.membership.phase is Phase.STABLE and not m.membership.rejoin_needed for m in live) and not (
            coordinator.parked
        ):
            return
    raise AssertionError(f"the group did not settle in {rounds} rounds: {[m.membership.phase for m in live]}")
