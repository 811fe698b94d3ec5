"""The gRPC servicer of ``service Groups``: translations between protobuf messages and the coordinator's
values (:mod:`multiraft.consumer_groups`), served by :class:`multiraft.node.services.ConsumerGroupsService`.

Proto -> coordinator: an empty ``group_instance_id``, ``rack`` or ``protocol_*`` means none; an empty
``protocol_type`` of a join means "consumer". Refusals end the call with their status (``rpc.proto.status``), as
every servicer's do (:func:`rpc.server.handlers.mapped`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import grpc

from multiraft import consumer_groups as g
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import to_proto_error
from rpc.server.handlers import mapped
from rpc.server.limits import RequestLimits

if TYPE_CHECKING:
    from multiraft.node.services import ConsumerGroupDescription, ConsumerGroupsService

__all__ = ["ConsumerGroupsServicer", "subscription_from_pb", "subscription_pb", "partitions_pb"]

Context = grpc.aio.ServicerContext[Any, Any]


def _none_if_empty(value: str) -> str | None:
    return value or None


def partitions_pb(partitions: Iterable[g.TopicPartition]) -> list[pb.TopicPartition]:
    return [pb.TopicPartition(topic=t, partition=p) for t, p in sorted(partitions)]


def _partitions(items: Iterable[pb.TopicPartition]) -> frozenset[g.TopicPartition]:
    return frozenset((tp.topic, tp.partition) for tp in items)


def subscription_from_pb(s: pb.GroupSubscription) -> g.Subscription:
    return g.Subscription(
        tuple(s.topics), _partitions(s.owned), s.owned_generation, _none_if_empty(s.rack), bytes(s.user_data)
    )


def subscription_pb(s: g.Subscription) -> pb.GroupSubscription:
    return pb.GroupSubscription(
        topics=list(s.topics),
        owned=partitions_pb(s.owned),
        owned_generation=s.owned_generation,
        rack=s.rack or "",
        user_data=s.user_data,
    )


def _description_pb(result: ConsumerGroupDescription) -> pb.GroupDescription:
    if result.error is not None or result.description is None:
        error = to_proto_error(result.error) if result.error is not None else None
        return pb.GroupDescription(group=result.group, error=error, state=g.GroupState.DEAD.value)
    d = result.description
    return pb.GroupDescription(
        group=d.group_id,
        state=d.state.value,
        protocol_type=d.protocol_type or "",
        protocol_name=d.protocol_name or "",
        generation=d.generation,
        leader_id=d.leader_id,
        coordinator_id=result.coordinator,
        members=[
            pb.GroupMemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id or "",
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                topics=list(m.subscription.topics),
                assignment=partitions_pb(m.assignment),
            )
            for m in d.members
        ],
    )


def _client_host(context: Context) -> str:
    peer = context.peer() if hasattr(context, "peer") else ""
    return str(peer or "")


class ConsumerGroupsServicer(pb_grpc.GroupsServicer):
    def __init__(self, groups: ConsumerGroupsService, limits: RequestLimits | None = None) -> None:
        self._groups = groups
        self._limits = limits or RequestLimits()

    @mapped
    async def JoinGroup(  # noqa: N802 - gRPC method names
        self, request: pb.JoinGroupRequest, context: Context
    ) -> pb.JoinGroupResponse:
        join = g.JoinRequest(
            member_id=request.member_id,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocols=tuple(request.protocols),
            subscription=subscription_from_pb(request.subscription),
            group_instance_id=_none_if_empty(request.group_instance_id),
            protocol_type=request.protocol_type or g.CONSUMER_PROTOCOL,
            client_id=request.client_id,
            client_host=_client_host(context),
        )
        reply = await self._groups.join(request.group, join)
        return pb.JoinGroupResponse(
            member_id=reply.member_id,
            generation=reply.generation,
            protocol_type=reply.protocol_type or "",
            protocol_name=reply.protocol_name or "",
            leader_id=reply.leader_id,
            skip_assignment=reply.skip_assignment,
            members=[
                pb.GroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id or "",
                    subscription=subscription_pb(m.subscription),
                )
                for m in reply.members
            ],
        )

    @mapped
    async def SyncGroup(  # noqa: N802
        self, request: pb.SyncGroupRequest, context: Context
    ) -> pb.SyncGroupResponse:
        sync = g.SyncRequest(
            member_id=request.member_id,
            generation=request.generation,
            assignments=tuple((a.member_id, _partitions(a.partitions)) for a in request.assignments),
            group_instance_id=_none_if_empty(request.group_instance_id),
            protocol_type=_none_if_empty(request.protocol_type),
            protocol_name=_none_if_empty(request.protocol_name),
        )
        reply = await self._groups.sync(request.group, sync)
        return pb.SyncGroupResponse(
            generation=reply.generation,
            protocol_type=reply.protocol_type or "",
            protocol_name=reply.protocol_name or "",
            assignment=partitions_pb(reply.assignment),
        )

    @mapped
    async def Heartbeat(  # noqa: N802
        self, request: pb.GroupHeartbeatRequest, context: Context
    ) -> pb.GroupHeartbeatResponse:
        beat = g.HeartbeatRequest(request.member_id, request.generation, _none_if_empty(request.group_instance_id))
        await self._groups.heartbeat(request.group, beat)
        return pb.GroupHeartbeatResponse()

    @mapped
    async def LeaveGroup(  # noqa: N802
        self, request: pb.LeaveGroupRequest, context: Context
    ) -> pb.LeaveGroupResponse:
        await self._groups.leave(
            request.group, g.LeaveRequest(request.member_id, _none_if_empty(request.group_instance_id))
        )
        return pb.LeaveGroupResponse()

    @mapped
    async def DescribeGroups(  # noqa: N802
        self, request: pb.DescribeGroupsRequest, context: Context
    ) -> pb.DescribeGroupsResponse:
        results = await self._groups.describe(list(request.groups))
        return pb.DescribeGroupsResponse(groups=[_description_pb(r) for r in results])

    @mapped
    async def DeleteGroups(  # noqa: N802
        self, request: pb.DeleteGroupsRequest, context: Context
    ) -> pb.DeleteGroupsResponse:
        errors = await self._groups.delete(list(request.groups))
        return pb.DeleteGroupsResponse(
            results=[
                pb.GroupResult(group=group, error=to_proto_error(error) if error is not None else None)
                for group, error in zip(request.groups, errors, strict=True)
            ]
        )
