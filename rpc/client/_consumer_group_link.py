"""How a group member reaches its coordinator: the Groups calls and member-fenced offset commits.

:class:`GroupLink` is what :class:`~rpc.client._consumer_group_member.GroupMembership` needs; :class:`GrpcGroupLink`
serves it over ``service Groups`` on any node (the node forwards to the coordinator), and tests serve it
with an in-process :class:`multiraft.consumer_groups.GroupCoordinator`. Values are :mod:`multiraft.consumer_groups`' own
requests and replies; refusals are :mod:`multiraft.errors` group errors.

JoinGroup and SyncGroup are long polls (the coordinator parks them until the generation forms), so they run
on a daemon thread each and hand back a future: the consumer keeps reading the partitions it keeps while a
cooperative rebalance runs. They get ONE attempt of ``rebalance timeout + 5 s``; ``call_any_node`` moves to
another node only when a node fails fast.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Protocol, TypeVar

import grpc

from multiraft.consumer_groups import (
    NO_GENERATION,
    HeartbeatRequest,
    JoinReply,
    JoinRequest,
    LeaveRequest,
    MemberSubscription,
    Subscription,
    SyncReply,
    SyncRequest,
)
from multiraft.errors import MultiraftError
from rpc.client._cluster import ClusterClient
from rpc.client._records import TopicPartition
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc

__all__ = [
    "GroupLink",
    "GrpcGroupLink",
    "LONG_POLL_MARGIN_S",
    "commit_offsets",
    "subscription_to_proto",
    "subscription_from_proto",
]

LONG_POLL_MARGIN_S = 5.0  # a parked JoinGroup/SyncGroup may take the rebalance timeout; the answer needs time too

Reply = TypeVar("Reply")


class GroupLink(Protocol):
    """The coordinator as a member sees it. ``join``/``sync`` answer through futures (they may wait for the
    rest of the group); the others answer at once. Every refusal is a :class:`multiraft.errors.GroupError`
    (or a transport error: ``UnavailableError``, ``RequestTimeoutError``)."""

    def join(self, request: JoinRequest) -> Future[JoinReply]: ...

    def sync(self, request: SyncRequest) -> Future[SyncReply]: ...

    def heartbeat(self, request: HeartbeatRequest) -> None: ...

    def leave(self, request: LeaveRequest) -> None: ...

    def commit(
        self, offsets: Mapping[TopicPartition, int], member_id: str, generation: int, instance_id: str | None
    ) -> None: ...


def subscription_to_proto(subscription: Subscription) -> pb.GroupSubscription:
    return pb.GroupSubscription(
        topics=list(subscription.topics),
        owned=[pb.TopicPartition(topic=t, partition=p) for t, p in sorted(subscription.owned)],
        owned_generation=subscription.owned_generation,
        rack=subscription.rack or "",
        user_data=subscription.user_data,
    )


def subscription_from_proto(message: pb.GroupSubscription) -> Subscription:
    return Subscription(
        topics=tuple(message.topics),
        owned=frozenset((tp.topic, tp.partition) for tp in message.owned),
        owned_generation=message.owned_generation,
        rack=message.rack or None,
        user_data=message.user_data,
    )


def commit_offsets(
    client: ClusterClient,
    group: str,
    offsets: Mapping[TopicPartition, int],
    *,
    member_id: str = "",
    generation: int = NO_GENERATION,
    instance_id: str | None = None,
) -> None:
    """Log.CommitOffsets: the NEXT offset to read per partition, as ``member_id`` of ``generation`` (a commit
    outside any generation with the defaults)."""
    now_ms = time.time_ns() // 1_000_000
    request = pb.CommitOffsetsRequest(
        group=group,
        offsets=[
            pb.CommittedOffset(topic=tp[0], partition=tp[1], offset=offset, commit_time_ms=now_ms)
            for tp, offset in offsets.items()
        ],
        member_id=member_id,
        group_instance_id=instance_id or "",
    )
    if generation != NO_GENERATION:
        request.generation = generation
    client.call_any_log(lambda stub, timeout: stub.CommitOffsets(request, timeout=timeout))


class GrpcGroupLink:
    """:class:`GroupLink` over ``service Groups``. ``request_timeout_s`` bounds the calls that answer at once;
    ``rebalance_timeout_ms`` the wait of a SyncGroup (which, unlike JoinGroup, does not carry it)."""

    def __init__(
        self, client: ClusterClient, group_id: str, *, request_timeout_s: float, rebalance_timeout_ms: int
    ) -> None:
        self._client = client
        self._group = group_id
        self._request_timeout_s = request_timeout_s
        self._rebalance_timeout_ms = rebalance_timeout_ms

    def join(self, request: JoinRequest) -> Future[JoinReply]:
        message = pb.JoinGroupRequest(
            group=self._group,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id or "",
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocols=list(request.protocols),
            subscription=subscription_to_proto(request.subscription),
            protocol_type=request.protocol_type,
            client_id=request.client_id,
        )

        def call(channel: grpc.Channel, timeout: float) -> JoinReply:
            response = pb_grpc.GroupsStub(channel).JoinGroup(message, timeout=timeout)
            return JoinReply(
                response.member_id,
                response.generation,
                response.protocol_type or None,
                response.protocol_name or None,
                response.leader_id,
                response.skip_assignment,
                tuple(
                    MemberSubscription(
                        m.member_id, m.group_instance_id or None, subscription_from_proto(m.subscription)
                    )
                    for m in response.members
                ),
            )

        return self._long_poll("JoinGroup", call, request.rebalance_timeout_ms)

    def sync(self, request: SyncRequest) -> Future[SyncReply]:
        message = pb.SyncGroupRequest(
            group=self._group,
            member_id=request.member_id,
            generation=request.generation,
            group_instance_id=request.group_instance_id or "",
            assignments=[
                pb.MemberAssignment(
                    member_id=member_id,
                    partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in sorted(partitions)],
                )
                for member_id, partitions in request.assignments
            ],
            protocol_type=request.protocol_type or "",
            protocol_name=request.protocol_name or "",
        )

        def call(channel: grpc.Channel, timeout: float) -> SyncReply:
            response = pb_grpc.GroupsStub(channel).SyncGroup(message, timeout=timeout)
            return SyncReply(
                request.member_id,
                response.generation,
                response.protocol_type or None,
                response.protocol_name or None,
                frozenset((tp.topic, tp.partition) for tp in response.assignment),
            )

        return self._long_poll("SyncGroup", call, self._rebalance_timeout_ms)

    def heartbeat(self, request: HeartbeatRequest) -> None:
        message = pb.GroupHeartbeatRequest(
            group=self._group,
            member_id=request.member_id,
            generation=request.generation,
            group_instance_id=request.group_instance_id or "",
        )
        self._client.call_any_node(
            lambda channel, timeout: pb_grpc.GroupsStub(channel).Heartbeat(message, timeout=timeout),
            timeout_s=self._request_timeout_s,
        )

    def leave(self, request: LeaveRequest) -> None:
        message = pb.LeaveGroupRequest(
            group=self._group, member_id=request.member_id, group_instance_id=request.group_instance_id or ""
        )
        self._client.call_any_node(
            lambda channel, timeout: pb_grpc.GroupsStub(channel).LeaveGroup(message, timeout=timeout),
            timeout_s=self._request_timeout_s,
        )

    def commit(
        self, offsets: Mapping[TopicPartition, int], member_id: str, generation: int, instance_id: str | None
    ) -> None:
        commit_offsets(
            self._client, self._group, offsets, member_id=member_id, generation=generation, instance_id=instance_id
        )

    def _long_poll(
        self, name: str, call: Callable[[grpc.Channel, float], Reply], rebalance_timeout_ms: int
    ) -> Future[Reply]:
        """Run ``call`` on a daemon thread with one deadline of the rebalance timeout plus a margin (never the
        halves ``call_any_node`` gives an attempt: a parked call would be cut short and rejoin forever)."""
        future: Future[Reply] = Future()
        budget_s = rebalance_timeout_ms / 1000 + LONG_POLL_MARGIN_S
        deadline = time.monotonic() + budget_s

        def run() -> None:
            try:
                reply = self._client.call_any_node(
                    lambda channel, _attempt: call(channel, max(0.001, deadline - time.monotonic())),
                    timeout_s=budget_s,
                )
            except MultiraftError as exc:
                future.set_exception(exc)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(reply)

        threading.Thread(target=run, name=f"multiraft-group-{name}", daemon=True).start()
        return future
