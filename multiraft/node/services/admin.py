"""The admin service: topics, metadata, cluster description, draining and removing nodes (event loop).

Changes go to the controller leader (``ControllerClient``) and are answered once this node has applied them
(bounded waits), so a client that creates a topic can use it through the same node at once. Live figures
(leaders, in-sync replicas, high watermarks, moves) are asked of the partitions' leaders.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from multiraft import controller as ctl
from multiraft.errors import (
    InvalidArgumentError,
    MultiraftError,
    UnknownNodeError,
    UnknownTopicError,
    error_for_reason,
)
from multiraft.node.protocols import (
    ClusterView,
    ControllerClient,
    LeaderDirectory,
    Liveness,
    MoveSource,
    PartitionStatusSource,
)
from multiraft.node.services._waits import wait_for_topic
from multiraft.node.services.results import (
    ClusterDescription,
    DrainProgress,
    NodeDescription,
    PartitionDescription,
    TopicDescription,
)
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.controller import CreatePartitionsRequest, CreateTopicRequest, NodeStateRequest
from multiraft.node.vocabulary.status import PartitionStatus

__all__ = ["AdminService", "AdminSettings"]

_LEADERS_WAIT_S = 10.0
_CONFIGS_WAIT_S = 5.0
_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """The node config fields the admin service uses."""

    cluster_id: str
    default_partitions: int
    default_replication_factor: int
    max_topic_partitions: int


class AdminService(LoopOwned):
    """Topic administration and cluster description."""

    def __init__(
        self,
        settings: AdminSettings,
        cluster: ClusterView,
        leaders: LeaderDirectory,
        liveness: Liveness,
        controller: ControllerClient,
        status: PartitionStatusSource,
        moves: MoveSource,
    ) -> None:
        self.settings = settings
        self._cluster = cluster
        self._leaders = leaders
        self._liveness = liveness
        self._controller = controller
        self._status = status
        self._moves = moves

    @property
    def cluster_id(self) -> str:
        return self.settings.cluster_id

    @property
    def controller_leader(self) -> int:
        return self._cluster.controller_leader

    # ------------------------------------------------------------------------------------------- topics

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicDescription:
        settings = self.settings
        partitions = partitions or settings.default_partitions
        replication_factor = replication_factor or settings.default_replication_factor
        if not 1 <= partitions <= settings.max_topic_partitions:
            raise InvalidArgumentError(
                f"partitions must be in [1, {settings.max_topic_partitions}], got {partitions}", field="partitions"
            )
        if replication_factor < 1:
            raise InvalidArgumentError("replication_factor must be >= 1", field="replication_factor")
        await self._controller.call(CreateTopicRequest(name, partitions, replication_factor, configs))
        await wait_for_topic(self._cluster, name, present=True)
        await self._wait_for_leaders(name)
        return await self.describe_topic(name)

    async def delete_topic(self, name: str) -> None:
        self._cluster.partition_state(name, 0)
        await self._controller.call(ctl.DeleteTopic(name))
        await wait_for_topic(self._cluster, name, present=False)

    async def alter_topic_configs(self, name: str, set_: dict[str, str], delete: Sequence[str]) -> TopicDescription:
        self._cluster.partition_state(name, 0)
        await self._controller.call(ctl.AlterTopicConfigs(name, dict(set_), tuple(delete)))
        deadline = time.monotonic() + _CONFIGS_WAIT_S
        while time.monotonic() < deadline and not _configs_applied(
            self._cluster.cluster.topics.get(name), set_, delete
        ):
            await asyncio.sleep(_POLL_S)
        return await self.describe_topic(name)

    # ------------------------------------------------------------- dynamic cluster-wide configuration

    def describe_cluster_configs(self, keys: Sequence[str] = ()) -> list[ctl.ClusterConfigEntry]:
        """The cluster settings named (all when none are), as this node's copy of the controller state has them."""
        try:
            return ctl.describe_cluster_configs(self._cluster.cluster.cluster_configs, keys)
        except ctl.InvalidConfigError as exc:
            raise InvalidArgumentError(str(exc), field=exc.key) from exc

    async def alter_cluster_configs(self, set_: dict[str, str], delete: Sequence[str]) -> list[ctl.ClusterConfigEntry]:
        """Set and reset cluster settings through the controller; every setting once this node applied it."""
        await self._controller.call(ctl.AlterClusterConfigs(dict(set_), tuple(delete)))
        wanted = ctl.validate_cluster_configs(set_)  # valid: the controller applied it
        deadline = time.monotonic() + _CONFIGS_WAIT_S
        while time.monotonic() < deadline:
            stored = self._cluster.cluster.cluster_configs
            if all(stored.get(k) == v for k, v in wanted.items()) and not any(k in stored for k in delete):
                break
            await asyncio.sleep(_POLL_S)
        return self.describe_cluster_configs()

    async def _wait_for_leaders(self, name: str) -> None:
        deadline = time.monotonic() + _LEADERS_WAIT_S
        while time.monotonic() < deadline:
            topic = self._cluster.cluster.topics.get(name)
            if topic is None or all(self._leaders.leader_of(p.group_id) for p in topic.partitions):
                return
            await asyncio.sleep(_POLL_S)

    def list_topics(self, *, include_internal: bool = False) -> list[TopicDescription]:
        """User topics; with ``include_internal`` the system's too (rpk's ``topic list --internal``)."""
        if not include_internal:
            return [self._describe(topic) for topic in self._cluster.user_topics()]
        topics = self._cluster.cluster.topics
        return [self._describe(topics[name]) for name in sorted(topics)]

    async def describe_topic(self, name: str) -> TopicDescription:
        """Any topic, internal ones included (operators inspect ``__consumer_offsets``), with its live
        partition figures and every config with its source."""
        topic = self._cluster.cluster.topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}", topic=name)
        described = self._describe(topic, await self._status.partition_status(topic.partitions))
        return replace(
            described,
            config_entries=ctl.topic_config_entries(
                topic.configs, ctl.topic_defaults(self._cluster.cluster.cluster_configs)
            ),
        )

    # ------------------------------------------------------------------- adding partitions (issue 25)

    async def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow topic ``name`` to ``total`` partitions (Kafka's CreatePartitions); returns it once the new
        partitions have leaders (bounded wait). Keys may map to other partitions afterwards."""
        limit = self.settings.max_topic_partitions
        try:  # the controller leader judges again; asking here first gives the precise error without a hop
            ctl.partitions_to_add(self._cluster.cluster, name, total)
        except ctl.ControllerError as exc:
            raise error_for_reason(exc.reason, str(exc), exc.metadata) from exc
        if total > limit:
            raise InvalidArgumentError(f"partitions must be in [1, {limit}], got {total}", field="partitions")
        await self._controller.call(CreatePartitionsRequest(name, total))
        deadline = time.monotonic() + _CONFIGS_WAIT_S
        while time.monotonic() < deadline:
            topic = self._cluster.cluster.topics.get(name)
            if topic is None or len(topic.partitions) >= total:
                break
            await asyncio.sleep(_POLL_S)
        await self._wait_for_leaders(name)
        return await self.describe_topic(name)

    # ---------------------------------------------------------------- end of adding partitions (issue 25)

    def _describe(self, topic: ctl.Topic, live: dict[int, PartitionStatus] | None = None) -> TopicDescription:
        partitions = []
        for p in topic.partitions:
            status = (live or {}).get(p.group_id)
            partitions.append(
                PartitionDescription(
                    partition=p.partition,
                    leader=status.leader if status is not None else self._leaders.leader_of(p.group_id),
                    replicas=p.replicas,
                    in_sync_replicas=status.in_sync_replicas if status is not None else (),
                    preferred_leader=p.preferred_leader,
                    high_watermark=status.high_watermark if status is not None else 0,
                    log_start_offset=status.log_start_offset if status is not None else 0,
                    leader_epoch=status.term if status is not None else 0,
                    learners=p.learners,
                    replica_lag=dict(status.lag) if status is not None else {},
                )
            )
        return TopicDescription(
            topic.name, tuple(partitions), dict(topic.configs), topic.replication_factor, internal=topic.internal
        )

    def metadata(self, topics: Iterable[str]) -> tuple[list[NodeDescription], list[TopicDescription]]:
        known = self._cluster.cluster.topics
        wanted = list(dict.fromkeys(topics))  # a name asked twice is described once, as Kafka does
        for name in wanted:
            if name not in known:
                raise UnknownTopicError(f"unknown topic {name!r}", topic=name)
        chosen = [known[n] for n in wanted] if wanted else self._cluster.user_topics()
        return self.nodes(), [self._describe(t) for t in chosen]

    # -------------------------------------------------------------------------------------------- nodes

    def nodes(self) -> list[NodeDescription]:
        return [
            NodeDescription(n.node_id, n.client_address, n.peer_address, n.rack, self._node_state(n), n.capacity)
            for n in sorted(self._cluster.cluster.nodes.values(), key=lambda n: n.node_id)
        ]

    def _node_state(self, node: ctl.NodeInfo) -> str:
        """The administrative state (draining, removed), or for an active node its liveness as the member-list
        says: alive, suspect, dead, left, or unknown (not gossiped to this node yet)."""
        if node.state is not ctl.NodeState.ACTIVE:
            return str(node.state)
        return self._liveness.state(node.node_id)

    async def describe_cluster(self) -> ClusterDescription:
        cluster = self._cluster.cluster
        partitions = [p for t in self._cluster.user_topics() for p in t.partitions]
        live = await self._status.partition_status(partitions)
        replicas = cluster.replica_counts()
        leaders: dict[int, int] = {}
        under = []
        for p in partitions:
            status = live.get(p.group_id)
            leader = status.leader if status is not None else self._leaders.leader_of(p.group_id)
            if leader:
                leaders[leader] = leaders.get(leader, 0) + 1
            # Short of the topic's replication factor in sync: a replica is down, lagging, or being replaced.
            wanted = max(len(p.replicas), cluster.topics[p.topic].replication_factor)
            if len(status.in_sync_replicas if status is not None else ()) < wanted:
                under.append((p.topic, p.partition))
        loads = tuple((node, replicas.get(node, 0), leaders.get(node, 0)) for node in sorted(replicas))
        moves_error: str | None = None
        try:
            moves = tuple(await self._moves.moves())
        except MultiraftError as exc:  # the rest of the description stands; no moves is not "none in flight"
            moves, moves_error = (), exc.message
        return ClusterDescription(
            self.settings.cluster_id,
            self._cluster.controller_leader,
            tuple(self.nodes()),
            loads,
            tuple(under),
            len(partitions),
            moves,
            moves_error,
        )

    async def drain_node(self, node_id: int, *, force: bool = False) -> DrainProgress:
        """Mark the node draining (idempotent) and report what is left on it; the controller leader's
        rebalancing moves its replicas, and preferred leadership, to other nodes. Refused (DRAIN_REFUSED)
        when fewer active nodes would remain than a topic's replication factor, unless ``force``."""
        node = self._registered(node_id)
        if node.state is not ctl.NodeState.DRAINING:
            await self._controller.call(NodeStateRequest(node_id, ctl.NodeState.DRAINING, force))
            await self._wait_for_state(node_id, ctl.NodeState.DRAINING)
        partitions = self._cluster.cluster.partitions_on_node(node_id)
        led = 0
        if partitions:
            status = await self._status.partition_status(partitions)
            led = sum(1 for p in partitions if (s := status.get(p.group_id)) is not None and s.leader == node_id)
        # A controller voter counts as a replica until another node has taken its vote (reconfigure.py):
        # stopping it before would cost the metadata a voter, and two such drains its quorum.
        voting = 1 if node_id in self._cluster.controller_voters else 0
        return DrainProgress(replicas_left=len(partitions) + voting, leaders_left=led)

    async def undrain_node(self, node_id: int) -> None:
        """Make a draining node active again (idempotent; Redpanda's recommission): it may receive replicas
        again, and the rebalancer stops moving what is left off it. A removed node stays removed."""
        node = self._registered(node_id)
        if node.state is not ctl.NodeState.ACTIVE:
            await self._controller.call(NodeStateRequest(node_id, ctl.NodeState.ACTIVE))
            await self._wait_for_state(node_id, ctl.NodeState.ACTIVE)

    async def remove_node(self, node_id: int) -> None:
        """Forget a node; the controller refuses (NODE_HAS_REPLICAS) while it holds any replica."""
        if node_id not in self._cluster.cluster.nodes:
            raise UnknownNodeError(f"node {node_id} is not a registered node", node_id=node_id)
        await self._controller.call(NodeStateRequest(node_id, ctl.NodeState.REMOVED))

    def _registered(self, node_id: int) -> ctl.NodeInfo:
        node = self._cluster.cluster.nodes.get(node_id)
        if node is None or node.state is ctl.NodeState.REMOVED:
            raise UnknownNodeError(f"node {node_id} is not a registered node", node_id=node_id)
        return node

    async def _wait_for_state(self, node_id: int, state: ctl.NodeState) -> None:
        """Until this node has applied the change (bounded), so the caller's next request here sees it."""
        deadline = time.monotonic() + _CONFIGS_WAIT_S
        while time.monotonic() < deadline:
            node = self._cluster.cluster.nodes.get(node_id)
            if node is None or node.state is state:
                return
            await asyncio.sleep(_POLL_S)


def _configs_applied(topic: ctl.Topic | None, set_: dict[str, str], delete: Sequence[str]) -> bool:
    if topic is None:
        return True
    return all(topic.configs.get(k) == v for k, v in set_.items()) and not any(k in topic.configs for k in delete)
