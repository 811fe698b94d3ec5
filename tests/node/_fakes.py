"""Fakes of the narrow protocols services depend on (multiraft/node/protocols.py), for in-process tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from multiraft import controller as ctl
from multiraft.errors import MultiraftError
from multiraft.node.cluster.directory import Directory
from multiraft.node.replicas.controller import controller_error
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.threads import ThreadOwner
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.controller import ControllerBody, ControllerOutcome, CreateTopicRequest, NodeStateRequest
from multiraft.node.vocabulary.partitions import ProduceResult
from multiraft.node.vocabulary.status import PartitionStatus
from storage import ReadResult
from storage.batch import BatchHeader
from tests.controller._helpers import cluster, create_topic, run


def directory(state: ctl.ClusterState, *, node_id: int = 1, controller_leader: int = 1) -> Directory:
    """The real loop-side directory (it does no I/O), holding ``state``."""
    found = Directory(node_id, ThreadOwner("event loop"))
    found.set_cluster(state)
    found.set_controller_leader(controller_leader)
    return found


def cluster_with_topic(name: str = "orders", partitions: int = 2, nodes: int = 3) -> ctl.ClusterState:
    return create_topic(cluster(nodes), name, partitions, min(3, nodes))


@dataclass
class FakeLog:
    """What the data service reads of a local log."""

    data: bytes = b""
    start_offset: int = 0
    by_timestamp: dict[int, int] = field(default_factory=dict)

    def read(self, offset: int, max_bytes: int, *, max_offset: int) -> Any:
        return ReadResult(self.data, 1 if self.data else 0, max_offset, self.start_offset, max_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return self.by_timestamp.get(timestamp_ms)


def lead(found: Directory, topic: str, partition: int, *, high_watermark: int = 0, log: Any = None) -> PartitionView:
    """Make this node the current leader of ``topic/partition`` in ``found``."""
    group_id = found.cluster.partition(topic, partition).group_id
    view = PartitionView(topic, partition, group_id, log or FakeLog())
    view.update(
        high_watermark=high_watermark, log_start_offset=0, leader_id=found.node_id, term=1, leader=True, current=True
    )
    found.add_view(view)
    return view


class FakeStore:
    """A StoreHandle that answers from scripts and records what it was handed."""

    def __init__(self) -> None:
        self.produced: list[tuple[PartitionView, bytes, BatchHeader]] = []
        self.produce_results: list[ProduceResult | MultiraftError | None] = []  # None: never commits
        self.offsets_calls: list[tuple[int, Any]] = []
        self.offsets_answers: list[Any] = []
        self.statuses: list[PartitionStatus] = []
        self.deletions: list[tuple[PartitionView, int, float]] = []  # DeleteRecords handed over

    def produce(self, view: PartitionView, batch: bytes, header: BatchHeader) -> asyncio.Future[ProduceResult]:
        self.produced.append((view, batch, header))
        future: asyncio.Future[ProduceResult] = asyncio.get_running_loop().create_future()
        outcome = self.produce_results.pop(0) if self.produce_results else ProduceResult(len(self.produced) - 1, 7)
        if isinstance(outcome, MultiraftError):
            future.set_exception(outcome)
        elif outcome is not None:
            future.set_result(outcome)
        return future

    async def offsets(self, group_id: int, operation: Any) -> Any:
        self.offsets_calls.append((group_id, operation))
        answer = self.offsets_answers.pop(0) if self.offsets_answers else None
        if isinstance(answer, MultiraftError):
            raise answer
        return answer

    async def partition_status(self, group_ids: Sequence[int]) -> list[PartitionStatus]:
        return [s for s in self.statuses if s.group_id in group_ids]

    async def delete_records(self, view: PartitionView, offset: int, timeout_s: float) -> int:
        self.deletions.append((view, offset, timeout_s))
        return max(offset, 0)

    async def capacity(self) -> NodeCapacity:
        return NodeCapacity(0, 0, 1 << 20, 0, 1 << 40, 1 << 40, "")


class FakeController:
    """A ControllerClient that applies what it is asked to a Directory's state, as a leader would."""

    def __init__(self, found: Directory | None = None) -> None:
        self.calls: list[ControllerBody] = []
        self.directory = found
        self.errors: list[MultiraftError] = []
        self.next_producer_id = 1000

    async def call(self, body: ControllerBody, *, timeout_s: float = 15.0) -> ControllerOutcome:
        self.calls.append(body)
        if self.errors:
            raise self.errors.pop(0)
        if isinstance(body, ctl.AllocateProducerIds):
            first, self.next_producer_id = self.next_producer_id, self.next_producer_id + body.count
            return ControllerOutcome(producer_ids=(first, body.count))
        if self.directory is not None:
            state = self.directory.cluster
            if isinstance(body, CreateTopicRequest):
                nodes = state.nodes_in_state(ctl.NodeState.ACTIVE)
                placed = ctl.place_new_topic(list(nodes), state, body.partitions, body.replication_factor)
                configs = ctl.validate_topic_configs(body.configs, creating=True)
                body = ctl.CreateTopic(body.name, configs, tuple(placed), internal=body.internal)
            elif isinstance(body, NodeStateRequest):
                try:
                    body = ctl.node_state_change(state, body.node_id, body.state, force=body.force)
                except ctl.ControllerError as exc:
                    raise controller_error(exc) from exc
            self.directory.set_cluster(run(state, body))
        return ControllerOutcome()


@dataclass
class FakeLiveness:
    states: dict[int, str] = field(default_factory=dict)
    gone: dict[int, float] = field(default_factory=dict)

    def state(self, node_id: int) -> str:
        return self.states.get(node_id, "alive")

    def is_live(self, node_id: int) -> bool:
        return self.state(node_id) in ("alive", "suspect")

    def is_suspect(self, node_id: int) -> bool:
        return self.state(node_id) == "suspect"

    def gone_for(self, node_id: int) -> float | None:
        return self.gone.get(node_id)


@dataclass
class FakeStatus:
    """A PartitionStatusSource answering from a dict (group id -> status)."""

    statuses: dict[int, PartitionStatus] = field(default_factory=dict)
    asked: list[tuple[int, ...]] = field(default_factory=list)

    async def partition_status(self, partitions: Sequence[ctl.PartitionState]) -> dict[int, PartitionStatus]:
        self.asked.append(tuple(p.group_id for p in partitions))
        return {p.group_id: self.statuses[p.group_id] for p in partitions if p.group_id in self.statuses}


class FakePeers:
    """A PeerCaller whose answers are scripted per request kind."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bytes]] = []
        self.answers: dict[int, list[tuple[int, bytes] | BaseException]] = {}
        self.connected_to: set[int] = set()

    async def call(self, to_node: int, kind: int, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        self.calls.append((to_node, kind, body))
        queue = self.answers.get(kind, [])
        if not queue:
            raise ConnectionError(f"node {to_node} does not answer")
        answer = queue.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def connected(self, node_id: int) -> bool:
        return node_id in self.connected_to


def status(group_id: int, *, leader: int = 1, isr: tuple[int, ...] = (1, 2, 3), **changes: Any) -> PartitionStatus:
    values: dict[str, Any] = {
        "group_id": group_id,
        "leader": leader,
        "term": 2,
        "high_watermark": 10,
        "log_start_offset": 0,
        "in_sync_replicas": isr,
        "lag": {},
        "acked": isr,
        "copies": {},
        "size_bytes": 0,
        "entries": 0,
    }
    values.update(changes)
    return PartitionStatus(**values)
