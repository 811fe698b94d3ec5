"""Topic and cluster administration: what ``multiraft topic ...`` and ``multiraft status`` use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb

__all__ = ["Admin", "TopicInfo", "PartitionInfo", "NodeInfo", "ClusterInfo", "NodeLoad"]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    in_sync_replicas: tuple[int, ...]
    preferred_leader: int
    high_watermark: int
    log_start_offset: int
    leader_epoch: int
    learners: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str]
    replication_factor: int


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    client_address: str
    rack: str
    state: str


@dataclass(frozen=True, slots=True)
class NodeLoad:
    node_id: int
    replicas: int
    leaders: int


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    cluster_id: str
    controller_id: int
    nodes: tuple[NodeInfo, ...]
    loads: tuple[NodeLoad, ...]
    under_replicated: tuple[tuple[str, int], ...]
    partitions: int


def _topic(message: pb.TopicInfo) -> TopicInfo:
    return TopicInfo(
        name=message.name,
        partitions=tuple(
            PartitionInfo(
                partition=p.partition,
                leader=p.leader,
                replicas=tuple(p.replicas),
                in_sync_replicas=tuple(p.in_sync_replicas),
                preferred_leader=p.preferred_leader,
                high_watermark=p.high_watermark,
                log_start_offset=p.log_start_offset,
                leader_epoch=p.leader_epoch,
                learners=tuple(p.learners),
            )
            for p in message.partitions
        ),
        configs=dict(message.configs),
        replication_factor=message.replication_factor,
    )


class Admin:
    """Create, delete, list, describe and alter topics; describe the cluster.

    >>> admin = Admin("127.0.0.1:7000")                        # doctest: +SKIP
    >>> admin.create_topic("events", partitions=6, replication_factor=3)   # doctest: +SKIP
    """

    def __init__(self, bootstrap: str | Sequence[str] | ClusterClient, *, request_timeout_s: float = 30.0) -> None:
        if isinstance(bootstrap, ClusterClient):
            self._client, self._owned = bootstrap, False
        else:
            self._client, self._owned = ClusterClient(bootstrap, request_timeout_s=request_timeout_s), True

    def close(self) -> None:
        if self._owned:
            self._client.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 0,
        replication_factor: int = 0,
        configs: Mapping[str, str] | None = None,
    ) -> TopicInfo:
        """Create a topic (0 means the cluster's default); returns it once every partition has a leader."""
        request = pb.CreateTopicRequest(
            name=name, partitions=partitions, replication_factor=replication_factor, configs=dict(configs or {})
        )
        response = self._client.call_any(lambda stub, timeout: stub.CreateTopic(request, timeout=timeout))
        self._client.metadata(refresh=True)
        return _topic(response.topic)

    def delete_topic(self, name: str) -> None:
        self._client.call_any(lambda stub, timeout: stub.DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=timeout))
        self._client.metadata(refresh=True)

    def list_topics(self) -> list[TopicInfo]:
        response = self._client.call_any(lambda stub, timeout: stub.ListTopics(pb.ListTopicsRequest(), timeout=timeout))
        return [_topic(t) for t in response.topics]

    def describe_topic(self, name: str) -> TopicInfo:
        request = pb.DescribeTopicRequest(name=name)
        return _topic(self._client.call_any(lambda stub, timeout: stub.DescribeTopic(request, timeout=timeout)).topic)

    def alter_topic_configs(
        self, name: str, *, set: Mapping[str, str] | None = None, delete: Sequence[str] = ()
    ) -> TopicInfo:
        request = pb.AlterTopicConfigsRequest(name=name, set=dict(set or {}), delete=list(delete))
        return _topic(
            self._client.call_any(lambda stub, timeout: stub.AlterTopicConfigs(request, timeout=timeout)).topic
        )

    def describe_cluster(self) -> ClusterInfo:
        response = self._client.call_any(
            lambda stub, timeout: stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=timeout)
        )
        return ClusterInfo(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            nodes=tuple(NodeInfo(n.node_id, n.client_address, n.rack, n.state) for n in response.nodes),
            loads=tuple(NodeLoad(n.node_id, n.replicas, n.leaders) for n in response.loads),
            under_replicated=tuple((tp.topic, tp.partition) for tp in response.under_replicated),
            partitions=response.partitions,
        )
