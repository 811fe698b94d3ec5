"""Topic and cluster administration: what ``multiraft topic ...`` and ``multiraft status`` use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import grpc

from multiraft.errors import (
    InvalidArgumentError,
    UnknownPartitionError,
    UnknownTopicError,
)
from rpc.client._cluster import ClusterClient
from rpc.client._consumer_group_admin import GroupAdmin, call_any_node_final
from rpc.client._records import TopicPartition
from rpc.client._security_admin import SecurityAdmin
from rpc.client._tls import TlsSettings
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_proto_error, from_rpc_error

__all__ = [
    "Admin",
    "TopicInfo",
    "ConfigEntry",
    "PartitionInfo",
    "NodeInfo",
    "ClusterInfo",
    "NodeLoad",
    "MoveInfo",
    "DrainStatus",
    "OffsetSpec",
    "ClusterConfig",
]

OffsetSpec = Literal["earliest", "latest"] | int
"""``"earliest"`` (the log start), ``"latest"`` (the high watermark) or a timestamp in ms since the epoch."""

Response = TypeVar("Response")

_BACKOFF_START_S = 0.02
_BACKOFF_MAX_S = 0.5


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
    replica_lag: dict[int, int] = field(default_factory=dict)
    """Log entries each follower is behind the leader, by node id (the leader is not listed); empty when the
    answer did not say (``list_topics``, or a partition without a leader)."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: dict[str, str]
    """The configs stored on the topic (set at creation or altered, and the keys fixed at creation)."""
    replication_factor: int
    internal: bool = False
    """A system topic (``__consumer_offsets``): listed only with ``list_topics(include_internal=True)``."""
    config_entries: tuple[ConfigEntry, ...] = ()
    """Every config key with its effective value and source, sorted by key; ``describe_topic`` only."""


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One topic config as Kafka's DescribeConfigs reports it."""

    name: str
    value: str
    """The effective value: the topic's, else the default."""
    source: str
    """``DYNAMIC_TOPIC_CONFIG`` (set on the topic) or ``DEFAULT_CONFIG``."""
    read_only: bool
    """Fixed at creation (``segment.bytes``, ``segment.ms``)."""


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
class MoveInfo:
    """A replica move in flight: ``from_node`` 0 when a replica is only added (a lost replica replaced)."""

    topic: str
    partition: int
    from_node: int
    to_node: int
    phase: str
    """adding, copying, catching_up, promoting or removing."""
    bytes_copied: int
    bytes_total: int
    eta_seconds: float
    """0 when unknown (nothing copied yet)."""


@dataclass(frozen=True, slots=True)
class DrainStatus:
    """What is still on a draining node, as the node reports it."""

    replicas_left: int
    leaders_left: int
    safe_to_stop: bool
    """The node's verdict (nothing left on it), not recomputed here."""


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    cluster_id: str
    controller_id: int
    nodes: tuple[NodeInfo, ...]
    loads: tuple[NodeLoad, ...]
    under_replicated: tuple[tuple[str, int], ...]
    partitions: int
    moves: tuple[MoveInfo, ...] = ()
    moves_error: str | None = None
    """Why ``moves`` could not be read (the controller leader did not answer; ``moves`` is then empty, which
    does not mean none are in flight); None when they were."""


def _topic(message: pb.TopicInfo, entries: Iterable[pb.ConfigEntry] = ()) -> TopicInfo:
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
                replica_lag=dict(p.replica_lag),
            )
            for p in message.partitions
        ),
        configs=dict(message.configs),
        replication_factor=message.replication_factor,
        internal=message.internal,
        config_entries=tuple(ConfigEntry(e.name, e.value, e.source, e.read_only) for e in entries),
    )


def _offset_spec(spec: OffsetSpec) -> tuple[pb.OffsetSpec.ValueType, int]:
    if spec == "earliest":
        return pb.EARLIEST, 0
    if spec == "latest":
        return pb.LATEST, 0
    if isinstance(spec, int) and not isinstance(spec, bool):
        return pb.TIMESTAMP, spec
    raise InvalidArgumentError(
        f"offset spec must be 'earliest', 'latest' or a timestamp in ms, got {spec!r}", field="spec"
    )


def _only_offset(response: pb.ListOffsetsResponse, partition: int) -> int:
    for item in response.offsets:
        if item.partition == partition:
            if item.HasField("error"):
                raise from_proto_error(item.error)
            return item.offset
    raise UnknownPartitionError(
        f"the leader of {response.topic}/{partition} did not answer for it", topic=response.topic, partition=partition
    )


@dataclass(frozen=True)
class ClusterConfig:
    """A dynamic cluster-wide setting: its effective value and where that comes from (``DEFAULT_CONFIG`` or
    ``DYNAMIC_CLUSTER_CONFIG``)."""

    name: str
    value: str
    source: str
    default: str
    doc: str


def _cluster_configs(entries: Iterable[pb.ClusterConfigEntry]) -> dict[str, ClusterConfig]:
    return {e.name: ClusterConfig(e.name, e.value, e.source, e.default_value, e.doc) for e in entries}


class Admin(GroupAdmin, SecurityAdmin):
    """Create, delete, list, describe and alter topics; describe the cluster; list offsets and consumer groups.

    >>> admin = Admin("127.0.0.1:7000")                        # doctest: +SKIP
    >>> admin.create_topic("events", partitions=6, replication_factor=3)   # doctest: +SKIP
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | ClusterClient,
        *,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float | None = None,
        tls: TlsSettings | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        """``connect_timeout_s``: give up after this long while no node has answered yet (a wrong bootstrap
        fails with "no node reachable at ..."); None: the request timeout (see :class:`ClusterClient`). ``tls``: reach
        the cluster over TLS (:class:`TlsSettings`); None: plaintext. ``user``/``password``: SCRAM-SHA-256
        credentials (see :class:`ClusterClient`)."""
        if isinstance(bootstrap, ClusterClient):
            self._client, self._owned = bootstrap, False
        else:
            client = ClusterClient(
                bootstrap,
                request_timeout_s=request_timeout_s,
                connect_timeout_s=connect_timeout_s,
                tls=tls,
                user=user,
                password=password,
            )
            self._client, self._owned = client, True

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

    def list_topics(self, *, include_internal: bool = False) -> list[TopicInfo]:
        """Every topic the caller may describe; ``include_internal`` adds the system's (``__consumer_offsets``)."""
        request = pb.ListTopicsRequest(include_internal=include_internal)
        response = self._client.call_any(lambda stub, timeout: stub.ListTopics(request, timeout=timeout))
        return [_topic(t) for t in response.topics]

    def describe_topic(self, name: str) -> TopicInfo:
        """A topic with live partition figures and ``config_entries``; internal topics too."""
        request = pb.DescribeTopicRequest(name=name)
        response = self._client.call_any(lambda stub, timeout: stub.DescribeTopic(request, timeout=timeout))
        return _topic(response.topic, response.config_entries)

    def describe_topic_configs(self, name: str) -> tuple[ConfigEntry, ...]:
        """Every config of topic ``name`` with its value and source (Kafka's DescribeConfigs for a topic)."""
        return self.describe_topic(name).config_entries

    # ------------------------------------------------------------------- adding partitions (issue 25)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow topic ``name`` to ``total`` partitions (Kafka's ``createPartitions``, ``rpk topic
        add-partitions``); returns it once the new partitions have leaders. Partitions are never removed: a
        total not above the current count is refused (INVALID_ARGUMENT), as is an internal topic. The new
        partitions are placed as a new topic's are; NOT_ENOUGH_REPLICAS or STORAGE_FULL when the live nodes
        cannot take them. Producers see the new count at their next metadata refresh, and from then on a key
        may map to another partition than before (as in Kafka)."""
        request = pb.CreatePartitionsRequest(name=name, total=total)
        response = self._client.call_any(lambda stub, timeout: stub.CreatePartitions(request, timeout=timeout))
        self._client.metadata(refresh=True)
        return _topic(response.topic)

    # ---------------------------------------------------------------- end of adding partitions (issue 25)

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
            moves=tuple(
                MoveInfo(
                    m.topic, m.partition, m.from_node, m.to_node, m.phase, m.bytes_copied, m.bytes_total, m.eta_seconds
                )
                for m in response.moves
            ),
            moves_error=response.moves_error or None,
        )

    def drain_node(self, node_id: int, *, force: bool = False) -> DrainStatus:
        """Start draining a node (idempotent) and return what is left on it; call again to follow progress.

        The controller moves every replica and preferred leadership off the node; it is safe to stop once
        ``safe_to_stop``. Raises UnknownNodeError for an id that is not registered, and DrainRefusedError when
        fewer active nodes would remain than some topic's replication factor (``force`` drains anyway: its
        replicas then stay where they are until nodes are added or it is undrained).
        """
        request = pb.DrainNodeRequest(node_id=node_id, force=force)
        response = self._client.call_any(lambda stub, timeout: stub.DrainNode(request, timeout=timeout))
        return DrainStatus(response.replicas_left, response.leaders_left, response.safe_to_stop)

    def undrain_node(self, node_id: int) -> None:
        """Make a draining node active again (idempotent; Redpanda's recommission): it may receive new replicas
        and the controller stops moving its replicas off. Raises UnknownNodeError for an id that is not
        registered or was removed (a removed node comes back only by registering again)."""
        request = pb.UndrainNodeRequest(node_id=node_id)
        self._client.call_any(lambda stub, timeout: stub.UndrainNode(request, timeout=timeout))

    def remove_node(self, node_id: int) -> None:
        """Forget a node. Raises NodeHasReplicasError while it still holds replicas (drain it first)."""
        request = pb.RemoveNodeRequest(node_id=node_id)
        self._client.call_any(lambda stub, timeout: stub.RemoveNode(request, timeout=timeout))

    # ------------------------------------------------------------------------------------------ offsets

    def list_offsets(self, topic: str, spec: OffsetSpec, partitions: Iterable[int] | None = None) -> dict[int, int]:
        """Per partition (all by default): the log start (``"earliest"``), the high watermark (``"latest"``), or
        the first offset whose timestamp is at or after ``spec`` ms since the epoch (-1 when none is).

        Only a partition's leader answers: one request goes to each leader node, and partitions whose
        leader moved meanwhile are asked again one by one through :meth:`ClusterClient.call_leader`.
        """
        kind, timestamp_ms = _offset_spec(spec)
        found = self._client.topic(topic)
        count = len(found.partitions)
        wanted = sorted(set(partitions)) if partitions is not None else list(range(count))
        for partition in wanted:
            if not 0 <= partition < count:
                raise UnknownPartitionError(
                    f"topic {topic!r} has {count} partition{'' if count == 1 else 's'}, "
                    f"there is no partition {partition}",
                    topic=topic,
                    partition=partition,
                )
        nodes = self._client.metadata().nodes
        by_leader: dict[str, list[int]] = {}
        again: set[int] = set()
        for partition in wanted:
            address = nodes.get(found.partitions[partition].leader)
            if address is None:
                again.add(partition)
            else:
                by_leader.setdefault(address, []).append(partition)
        offsets: dict[int, int] = {}
        first_try_s = max(1.0, self._client.request_timeout_s / 2)
        for address, group in by_leader.items():
            request = pb.ListOffsetsRequest(topic=topic, partitions=group, spec=kind, timestamp_ms=timestamp_ms)
            try:
                # half the budget at most: a leader that hangs still leaves time to ask its successor
                response = self._client.log_stub(address).ListOffsets(request, timeout=first_try_s)
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                if not error.retriable:
                    raise error from exc
                again.update(group)
                continue
            for item in response.offsets:
                if not item.HasField("error"):
                    offsets[item.partition] = item.offset
                    continue
                error = from_proto_error(item.error)
                if not error.retriable:
                    raise error
                again.add(item.partition)
            again.update(p for p in group if p not in offsets)
        for partition in sorted(again):
            offsets[partition] = self._leader_offset(topic, partition, kind, timestamp_ms)
        return dict(sorted(offsets.items()))

    def _leader_offset(self, topic: str, partition: int, kind: pb.OffsetSpec.ValueType, timestamp_ms: int) -> int:
        request = pb.ListOffsetsRequest(topic=topic, partitions=[partition], spec=kind, timestamp_ms=timestamp_ms)

        def ask(stub: pb_grpc.LogStub, timeout: float) -> int:
            return _only_offset(stub.ListOffsets(request, timeout=timeout), partition)

        return self._client.call_leader(topic, partition, ask)

    def describe_cluster_configs(self, keys: Sequence[str] = ()) -> dict[str, ClusterConfig]:
        """The dynamic cluster-wide settings named (every one when none are), by name; an unknown key raises
        InvalidArgumentError naming it."""
        request = pb.DescribeClusterConfigsRequest(keys=list(keys))
        response = self._client.call_any(lambda stub, timeout: stub.DescribeClusterConfigs(request, timeout=timeout))
        return _cluster_configs(response.configs)

    def alter_cluster_configs(
        self, *, set: Mapping[str, str] | None = None, delete: Sequence[str] = ()
    ) -> dict[str, ClusterConfig]:
        """Set and reset (``delete``: back to the default) dynamic cluster-wide settings, all or nothing; every
        setting after the change. Every node applies them as it applies the controller's state, without a
        restart. An unknown key or a bad value raises InvalidArgumentError naming the key."""
        request = pb.AlterClusterConfigsRequest(set=dict(set or {}), delete=list(delete))
        response = self._client.call_any(lambda stub, timeout: stub.AlterClusterConfigs(request, timeout=timeout))
        return _cluster_configs(response.configs)

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Kafka's DeleteRecords: per ``(topic, partition)``, delete the records before the offset (-1: the high
        watermark) on every replica; returns the new low watermarks (log start offsets).

        Each partition's leader replicates the deletion through the partition's Raft log, so it survives
        restarts and leader changes. An offset beyond the high watermark raises OffsetOutOfRangeError; one at or
        below the log start changes nothing and answers the current log start. Retried through leader changes
        (deleting again is harmless).
        """
        low_watermarks: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in offsets.items():
            count = len(self._client.topic(topic).partitions)
            if not 0 <= partition < count:
                raise UnknownPartitionError(
                    f"topic {topic!r} has {count} partition{'' if count == 1 else 's'}, "
                    f"there is no partition {partition}",
                    topic=topic,
                    partition=partition,
                )
            request = pb.DeleteRecordsRequest(topic=topic, partition=partition, offset=offset)

            def ask(stub: pb_grpc.LogStub, timeout: float, request: pb.DeleteRecordsRequest = request) -> int:
                return stub.DeleteRecords(request, timeout=timeout).low_watermark

            low_watermarks[(topic, partition)] = self._client.call_leader(topic, partition, ask)
        return low_watermarks

    # ----------------------------------------------------------------------------------- consumer groups

    def list_groups(self) -> list[str]:
        """The consumer groups that have committed offsets (or members), sorted; see also
        :meth:`list_group_listings` and :meth:`describe_groups`. LeaderNotAvailableError when part of them
        could not be listed (:meth:`list_groups_result` gives what did answer)."""
        return [listing.group for listing in self.list_group_listings()]

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        """Every offset ``group`` committed: the next offset it will consume, per partition.
        LeaderNotAvailableError at once when the group's ``__consumer_offsets`` partition has no leader."""
        if not group:
            raise InvalidArgumentError("group must not be empty", field="group")
        request = pb.FetchOffsetsRequest(group=group)
        response = call_any_node_final(
            self._client, lambda channel, timeout: pb_grpc.LogStub(channel).FetchOffsets(request, timeout=timeout)
        )
        committed = {TopicPartition(o.topic, o.partition): o.offset for o in response.offsets if o.offset >= 0}
        return dict(sorted(committed.items()))

    def group_lag(self, group: str) -> dict[TopicPartition, int]:
        """Records ``group`` has still to consume, per partition it committed: high watermark - committed offset.

        Partitions of topics deleted since the commit are left out.
        """
        committed = self.group_offsets(group)
        topics: dict[str, list[TopicPartition]] = {}
        for tp in committed:
            topics.setdefault(tp.topic, []).append(tp)
        lag: dict[TopicPartition, int] = {}
        for topic, tps in topics.items():
            try:
                latest = self.list_offsets(topic, "latest")
            except UnknownTopicError:
                continue
            for tp in tps:
                if tp.partition in latest:
                    lag[tp] = max(0, latest[tp.partition] - committed[tp])
        return lag
