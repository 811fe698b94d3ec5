"""Real multi-process clusters on 127.0.0.1 for the tests that need one, and helpers to produce and fetch.

Every cluster is started with the same launcher as ``scripts/cluster`` and stopped by PID at teardown, even
when the test fails. Timings are shortened (``tick_ms``) so elections take a few hundred milliseconds.

The fixtures (``cluster_factory``, ``cluster``, ``shared_cluster``) reach tests through the conftest.py of each
directory that runs clusters (integration, client, cli, spark), which imports them from here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from multiraft.errors import MultiraftError
from multiraft.tools.launcher import (
    ClusterInfo,
    cluster_down,
    cluster_up,
    kill_node,
    load_cluster,
    start_node,
    wait_serving,
)
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from storage import LogStore, decode_batches, encode_batch

FAST = {
    "tick_ms": 25,
    "election_ticks": 10,
    "heartbeat_ticks": 2,
    "retention_check_ms": 200,
    "membership_profile": "local",  # a crash is declared dead in ~2 s instead of ~10 s
}
# Consumer-group coordinator keys for tests: short sessions allowed, no wait for a fleet to arrive; pass them
# (or others) through cluster_factory(**settings) / cluster_up's settings.
FAST_GROUPS = {"group_min_session_timeout_ms": 1000, "group_initial_rebalance_delay_ms": 0}


@dataclass
class Cluster:
    info: ClusterInfo
    client: ClusterClient

    @property
    def bootstrap(self) -> str:
        return self.info.bootstrap

    def kill(self, node_id: int) -> None:
        assert kill_node(self.info, node_id), f"node {node_id} was not running"

    def start(self, node_id: int, *, wait: bool = True) -> None:
        start_node(self.info, node_id)
        if wait:
            wait_serving(self.info, [node_id], timeout_s=60)

    def restart_all(self) -> None:
        cluster_down(self.info.directory)
        for node_id in self.info.nodes:
            start_node(self.info, node_id)
        wait_serving(self.info, timeout_s=60)
        self.client.metadata(refresh=True)

    def leader(self, topic: str, partition: int, *, timeout_s: float = 10.0, other_than: int = 0) -> int:
        """The partition's leader, asked of the cluster until one is known (and is not ``other_than``: the
        survivors name a killed leader until a new one is elected and announced)."""
        deadline = time.monotonic() + timeout_s
        for _ in range(10_000):
            if time.monotonic() > deadline:
                break
            described = self.describe(topic)
            leader = described.partitions[partition].leader
            if leader and leader != other_than:
                return leader
            time.sleep(0.05)
        raise AssertionError(f"{topic}/{partition} has no leader other than {other_than} after {timeout_s}s")

    def describe(self, topic: str) -> pb.TopicInfo:
        request = pb.DescribeTopicRequest(name=topic)
        return self.client.call_any(lambda stub, timeout: stub.DescribeTopic(request, timeout=timeout)).topic

    def create_topic(self, name: str, partitions: int, replication_factor: int, **configs: str) -> pb.TopicInfo:
        request = pb.CreateTopicRequest(
            name=name,
            partitions=partitions,
            replication_factor=replication_factor,
            configs={k.replace("_", "."): v for k, v in configs.items()},
        )
        response = self.client.call_any(lambda stub, timeout: stub.CreateTopic(request, timeout=timeout))
        # The node that answers the metadata refresh may not have applied the creation yet.
        deadline = time.monotonic() + 10
        for _ in range(1_000):
            if name in self.client.metadata(refresh=True).topics or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        return response.topic


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def make(nodes: int = 3, **settings: object) -> Cluster:
        info = cluster_up(tmp_path / f"cluster{len(started)}", nodes, {**FAST, **settings})
        cluster = Cluster(info, ClusterClient(info.bootstrap, request_timeout_s=30))
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        cluster.client.close()
        cluster_down(cluster.info.directory)


@pytest.fixture
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for a module of tests that do not break it."""
    info = cluster_up(tmp_path_factory.mktemp("shared") / "cluster", 3, FAST)
    cluster = Cluster(info, ClusterClient(info.bootstrap, request_timeout_s=30))
    try:
        yield cluster
    finally:
        cluster.client.close()
        cluster_down(info.directory)


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.5) -> float:
    """Poll until ``condition()`` holds (a MultiraftError while asking counts as not yet: a node being killed
    or a leader moving); return the seconds it took, or fail naming ``what``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if condition():
                return time.monotonic() - start
        except MultiraftError:
            pass
        time.sleep(poll_s)
    raise AssertionError(f"{what} not reached within {timeout_s}s")


def record_values(producer: int, sequence: int, attempt: int, count: int) -> list[bytes]:
    return [b"p%d:s%d:a%d:r%d" % (producer, sequence, attempt, r) for r in range(count)]


def produce(
    client: ClusterClient,
    topic: str,
    partition: int,
    values: list[bytes],
    timeout_s: float = 10,
    max_attempts: int | None = None,
) -> int:
    """Produce one batch through the leader; returns its base offset. With ``max_attempts=1`` the batch is
    sent once: a caller that retries must then send a new, distinguishable batch."""
    request = pb.ProduceRequest(
        topic=topic, partition=partition, batch=encode_batch(values, timestamps_ms=int(time.time() * 1000))
    )
    response = client.call_leader(
        topic,
        partition,
        lambda stub, timeout: stub.Produce(request, timeout=timeout),
        timeout_s=timeout_s,
        max_attempts=max_attempts,
    )
    return response.base_offset


def fetch_all(
    client: ClusterClient, topic: str, partition: int, *, max_requests: int = 10_000, timeout_s: float = 120
) -> list[tuple[int, bytes]]:
    """Every committed record of a partition: (offset, value), in offset order."""
    records: list[tuple[int, bytes]] = []
    offset = 0
    deadline = time.monotonic() + timeout_s
    for _ in range(max_requests):
        if time.monotonic() > deadline:
            break
        request = pb.FetchRequest(topic=topic, partition=partition, offset=offset, max_bytes=4 << 20)
        response = client.call_leader(
            topic, partition, lambda stub, timeout, request=request: stub.Fetch(request, timeout=timeout)
        )
        if not response.batches:
            return records
        table = decode_batches(response.batches)
        offsets, values = table.column("offset").to_pylist(), table.column("value").to_pylist()
        records += [(o, v) for o, v in zip(offsets, values, strict=True) if o >= offset]
        offset = response.next_offset
        if offset >= response.high_watermark:
            return records
    raise AssertionError(
        f"{topic}/{partition} not read to its end in {max_requests} fetches or {timeout_s}s (at offset {offset})"
    )


@dataclass
class BackgroundProducer:
    """Produces batches to every partition of a topic from threads until stopped (or ``max_batches`` per
    partition, or ``max_seconds``); remembers what was acknowledged, when, and what was attempted."""

    client: ClusterClient
    topic: str
    partitions: int
    records_per_batch: int = 5
    max_batches: int = 1_000_000
    max_seconds: float = 600
    acked: dict[int, list[tuple[int, list[bytes]]]] = field(default_factory=dict)  # partition -> (offset, values)
    attempted: set[bytes] = field(default_factory=set)
    errors: list[MultiraftError] = field(default_factory=list)
    last_ack: dict[int, float] = field(default_factory=dict)
    ack_times: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # partition -> (sent, acked)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in range(self.partitions)]

    def start(self) -> BackgroundProducer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _run(self, partition: int) -> None:
        deadline = time.monotonic() + self.max_seconds
        for sequence in range(self.max_batches):
            if self._stop.is_set() or time.monotonic() > deadline:
                return
            for attempt in range(1_000):  # a retry is a new attempt: its records are told apart
                values = record_values(partition, sequence, attempt, self.records_per_batch)
                with self._lock:
                    self.attempted.update(values)
                sent = time.monotonic()
                try:
                    offset = produce(self.client, self.topic, partition, values, timeout_s=5, max_attempts=1)
                except MultiraftError as exc:
                    with self._lock:
                        self.errors.append(exc)
                    if self._stop.is_set():
                        return
                    time.sleep(0.02)
                    continue
                acked = time.monotonic()
                with self._lock:
                    self.acked.setdefault(partition, []).append((offset, values))
                    self.last_ack[partition] = acked
                    self.ack_times.setdefault(partition, []).append((sent, acked))
                break

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(batches) for batches in self.acked.values())

    def first_ack_sent_after(self, partition: int, moment: float) -> float | None:
        """When the first batch sent to ``partition`` after ``moment`` was acknowledged (None: none yet)."""
        with self._lock:
            times = list(self.ack_times.get(partition, ()))
        return next((acked for sent, acked in times if sent > moment), None)


def wait_settled(cluster: Cluster, topic: str, timeout_s: float, *, preferred_leaders: bool = True) -> None:
    """Until every partition has a leader (its preferred one, with ``preferred_leaders``, so no hand-back is
    due) and no follower lacks an entry of the leader's log, twice in a row with the same leaders and terms."""
    deadline = time.monotonic() + timeout_s
    previous = None
    partitions = cluster.describe(topic).partitions
    for _ in range(10_000):
        if time.monotonic() > deadline:
            break
        partitions = cluster.describe(topic).partitions
        settled = all(
            (p.leader == p.preferred_leader if preferred_leaders else p.leader != 0)
            and len(p.replica_lag) == len(p.replicas) - 1
            and not any(p.replica_lag.values())
            for p in partitions
        )
        leaders = [(p.leader, p.leader_epoch) for p in partitions]
        if settled and leaders == previous:
            return
        previous = leaders if settled else None
        time.sleep(0.2)
    raise AssertionError(f"{topic} did not settle in {timeout_s}s: {partitions}")


def assert_replicas_identical(directory: str, topic: str, partitions: int) -> None:
    """Every replica of every partition stores the same entries, byte for byte (the nodes are stopped)."""
    info = load_cluster(directory)
    logs: dict[int, list[list[tuple[int, int, int, bytes]]]] = {}
    for node_id, node in info.nodes.items():
        with LogStore.open(Path(node.directory) / "data") as store:
            logs[node_id] = []
            for partition in range(partitions):
                log = store.log(topic, partition, create=False)
                entries = log.entries(log.first_index(), log.last_index() + 1)
                logs[node_id].append([(e.index, e.term, int(e.kind), bytes(e.payload)) for e in entries])
    (first_node, first), *others = logs.items()
    for partition in range(partitions):
        for node_id, other in others:
            mine, theirs = first[partition], other[partition]
            if mine != theirs:
                common = min(len(mine), len(theirs))
                at = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), common)
                raise AssertionError(
                    f"{topic}/{partition} differs between nodes {first_node} ({len(mine)} entries) and {node_id} "
                    f"({len(theirs)} entries) from position {at}: "
                    f"{[e[:3] for e in mine[at : at + 3]]} vs {[e[:3] for e in theirs[at : at + 3]]}"
                )
