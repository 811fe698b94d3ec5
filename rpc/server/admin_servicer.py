"""The admin API's servicer: topics, configs, metadata, the cluster's description, drain and remove, as thin
translations between protobuf and :class:`multiraft.node.services.AdminService` (errors answered by
:mod:`rpc.server.handlers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from multiraft import controller as ctl
from multiraft.node.replicas.offsets import OFFSETS_TOPIC
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import to_proto_error
from rpc.server.limits import RequestLimits

if TYPE_CHECKING:
    from multiraft.node.services import (
        AdminService,
        ConsumerGroupsService,
        NodeDescription,
        OffsetsService,
        TopicDescription,
        UnansweredPartition,
    )
from rpc.server.handlers import invalid, mapped

__all__ = ["AdminServicer"]


def _topic_pb(topic: TopicDescription) -> pb.TopicInfo:
    return pb.TopicInfo(
        name=topic.name,
        replication_factor=topic.replication_factor,
        configs=topic.configs,
        internal=topic.internal,
        partitions=[
            pb.PartitionInfo(
                partition=p.partition,
                leader=p.leader,
                replicas=p.replicas,
                in_sync_replicas=p.in_sync_replicas,
                preferred_leader=p.preferred_leader,
                high_watermark=p.high_watermark,
                log_start_offset=p.log_start_offset,
                leader_epoch=p.leader_epoch,
                learners=p.learners,
                replica_lag=p.replica_lag,
            )
            for p in topic.partitions
        ],
    )


def _node_pb(node: NodeDescription) -> pb.NodeInfo:
    return pb.NodeInfo(
        node_id=node.node_id,
        client_address=node.client_address,
        peer_address=node.peer_address,
        rack=node.rack,
        state=node.state,
        capacity=node.capacity,
    )


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(
        self,
        admin: AdminService,
        offsets: OffsetsService,
        limits: RequestLimits | None = None,
        groups: ConsumerGroupsService | None = None,
    ) -> None:
        self._admin = admin
        self._offsets = offsets
        self._limits = limits or RequestLimits()
        self._groups = groups

    @mapped
    async def Metadata(  # noqa: N802
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.MetadataResponse:
        nodes, topics = self._admin.metadata(request.topics)
        return pb.MetadataResponse(
            cluster_id=self._admin.cluster_id,
            controller_id=self._admin.controller_leader,
            nodes=[_node_pb(n) for n in nodes],
            topics=[_topic_pb(t) for t in topics],
        )

    @mapped
    async def CreateTopic(  # noqa: N802
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreateTopicResponse:
        topic = await self._admin.create_topic(
            request.name, request.partitions, request.replication_factor, dict(request.configs)
        )
        return pb.CreateTopicResponse(topic=_topic_pb(topic))

    @mapped
    async def DeleteTopic(  # noqa: N802
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteTopicResponse:
        await self._admin.delete_topic(request.name)
        return pb.DeleteTopicResponse()

    @mapped
    async def ListTopics(  # noqa: N802
        self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListTopicsResponse:
        topics = self._admin.list_topics(include_internal=request.include_internal)
        return pb.ListTopicsResponse(topics=[_topic_pb(t) for t in topics])

    @mapped
    async def DescribeTopic(  # noqa: N802
        self, request: pb.DescribeTopicRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeTopicResponse:
        topic = await self._admin.describe_topic(request.name)
        entries = [
            pb.ConfigEntry(name=e.name, value=e.value, source=str(e.source), read_only=e.read_only)
            for e in topic.config_entries
        ]
        return pb.DescribeTopicResponse(topic=_topic_pb(topic), config_entries=entries)

    # ------------------------------------------------------------------- adding partitions (issue 25)

    @mapped
    async def CreatePartitions(  # noqa: N802
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreatePartitionsResponse:
        topic = await self._admin.create_partitions(request.name, request.total)
        return pb.CreatePartitionsResponse(topic=_topic_pb(topic))

    # ---------------------------------------------------------------- end of adding partitions (issue 25)

    @mapped
    async def AlterTopicConfigs(  # noqa: N802
        self, request: pb.AlterTopicConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AlterTopicConfigsResponse:
        topic = await self._admin.alter_topic_configs(request.name, dict(request.set), list(request.delete))
        return pb.AlterTopicConfigsResponse(topic=_topic_pb(topic))

    @mapped
    async def DescribeCluster(  # noqa: N802
        self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeClusterResponse:
        cluster = await self._admin.describe_cluster()
        return pb.DescribeClusterResponse(
            cluster_id=cluster.cluster_id,
            controller_id=cluster.controller_id,
            nodes=[_node_pb(n) for n in cluster.nodes],
            loads=[pb.NodeLoad(node_id=n, replicas=r, leaders=lead) for n, r, lead in cluster.loads],
            under_replicated=[pb.TopicPartition(topic=t, partition=p) for t, p in cluster.under_replicated],
            moves=[
                pb.ReplicaMove(
                    topic=m.topic,
                    partition=m.partition,
                    from_node=m.from_node,
                    to_node=m.to_node,
                    phase=m.phase,
                    bytes_copied=m.bytes_copied,
                    bytes_total=m.bytes_total,
                    eta_seconds=m.eta_seconds,
                )
                for m in cluster.moves
            ],
            partitions=cluster.partitions,
            moves_error=cluster.moves_error or "",
        )

    @mapped
    async def ListGroups(  # noqa: N802
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListGroupsResponse:
        if self._groups is None:
            names, unanswered = await self._offsets.list_groups()
            return pb.ListGroupsResponse(groups=names, unavailable=_unavailable_pb(unanswered))
        listed = await self._groups.listings()
        listings = [
            pb.GroupListing(group=r.group, state=r.state, protocol_type=r.protocol_type, members=r.members)
            for r in listed.rows
        ]
        return pb.ListGroupsResponse(
            groups=[r.group for r in listed.rows], listings=listings, unavailable=_unavailable_pb(listed.unanswered)
        )

    @mapped
    async def DrainNode(  # noqa: N802
        self, request: pb.DrainNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DrainNodeResponse:
        if request.node_id <= 0:
            raise invalid("node_id must be >= 1", "node_id")
        drain = await self._admin.drain_node(request.node_id, force=request.force)
        return pb.DrainNodeResponse(
            replicas_left=drain.replicas_left, leaders_left=drain.leaders_left, safe_to_stop=drain.safe_to_stop
        )

    @mapped
    async def UndrainNode(  # noqa: N802
        self, request: pb.UndrainNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UndrainNodeResponse:
        if request.node_id <= 0:
            raise invalid("node_id must be >= 1", "node_id")
        await self._admin.undrain_node(request.node_id)
        return pb.UndrainNodeResponse()

    @mapped
    async def RemoveNode(  # noqa: N802
        self, request: pb.RemoveNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RemoveNodeResponse:
        if request.node_id <= 0:
            raise invalid("node_id must be >= 1", "node_id")
        await self._admin.remove_node(request.node_id)
        return pb.RemoveNodeResponse()

    # --- issue 25: cluster-wide configuration ---

    @mapped
    async def DescribeClusterConfigs(  # noqa: N802
        self, request: pb.DescribeClusterConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DescribeClusterConfigsResponse:
        entries = self._admin.describe_cluster_configs(list(request.keys))
        return pb.DescribeClusterConfigsResponse(configs=[_cluster_config_pb(e) for e in entries])

    @mapped
    async def AlterClusterConfigs(  # noqa: N802
        self, request: pb.AlterClusterConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AlterClusterConfigsResponse:
        entries = await self._admin.alter_cluster_configs(dict(request.set), list(request.delete))
        return pb.AlterClusterConfigsResponse(configs=[_cluster_config_pb(e) for e in entries])


def _cluster_config_pb(entry: ctl.ClusterConfigEntry) -> pb.ClusterConfigEntry:
    return pb.ClusterConfigEntry(
        name=entry.name, value=entry.value, source=entry.source, default_value=entry.default, doc=entry.doc
    )


def _unavailable_pb(unanswered: list[UnansweredPartition]) -> list[pb.UnavailablePartition]:
    return [
        pb.UnavailablePartition(topic=OFFSETS_TOPIC, partition=u.partition, error=to_proto_error(u.error))
        for u in unanswered
    ]
