"""A 3-node cluster of real processes on 127.0.0.1: replication, failover, restarts, partitions, retention."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from multiraft.launcher import cluster_down, load_cluster
from rpc.proto import multiraft_pb2 as pb
from storage import LogStore
from tests.integration.conftest import BackgroundProducer, Cluster, fetch_all, produce, record_values

pytestmark = pytest.mark.integration


def _batches_per_partition(cluster: Cluster, topic: str, partitions: int, batches: int) -> None:
    """Produce ``batches`` batches round-robin across partitions, several in flight."""
    from concurrent.futures import ThreadPoolExecutor

    def run(partition: int) -> None:
        for sequence in range(partition, batches, partitions):
            produce(cluster.client, topic, partition, record_values(partition, sequence, 0, 3))

    with ThreadPoolExecutor(partitions) as pool:
        list(pool.map(run, range(partitions)))


def test_three_nodes_replicate_ten_thousand_batches_and_serve_them_back_in_order(cluster: Cluster) -> None:
    topic = cluster.create_topic("orders", partitions=6, replication_factor=3)
    assert len(topic.partitions) == 6
    assert all(sorted(p.replicas) == [1, 2, 3] for p in topic.partitions)
    assert sorted(p.preferred_leader for p in topic.partitions) == [1, 1, 2, 2, 3, 3]
    _batches_per_partition(cluster, "orders", 6, 10_000)
    for partition in range(6):
        records = fetch_all(cluster.client, "orders", partition)
        assert [offset for offset, _ in records] == list(range(len(records)))
        expected = [v for seq in range(partition, 10_000, 6) for v in record_values(partition, seq, 0, 3)]
        assert [value for _, value in records] == expected


def test_killing_each_partition_leader_in_turn_loses_no_acknowledged_write(cluster: Cluster) -> None:
    cluster.create_topic("payments", partitions=6, replication_factor=3)
    producer = BackgroundProducer(cluster.client, "payments", 6).start()
    resume_times = []
    try:
        time.sleep(1)
        for partition in range(6):
            leader = cluster.leader("payments", partition)
            before = producer.acked_count()
            killed_at = time.monotonic()
            cluster.kill(leader)
            deadline = killed_at + 10
            while time.monotonic() < deadline and producer.last_ack.get(partition, 0) <= killed_at:
                time.sleep(0.01)
            resume_times.append(producer.last_ack.get(partition, 0) - killed_at)
            cluster.start(leader)
            assert producer.acked_count() > before
        time.sleep(0.5)
    finally:
        producer.stop()
    assert max(resume_times) < 2.0, f"writes resumed after {resume_times} s"

    for partition in range(6):
        records = fetch_all(cluster.client, "payments", partition)
        stored = [value for _, value in records]
        assert len(stored) == len(set(stored)), "a record was written twice"
        assert set(stored) <= producer.attempted
        by_value = {value: offset for offset, value in records}
        for offset, values in producer.acked[partition]:
            assert [by_value.get(v) for v in values] == list(range(offset, offset + len(values))), (
                f"acknowledged batch at {offset} of payments/{partition} is missing or moved"
            )

    # Once the followers have caught up, every replica of every partition holds the same bytes.
    _wait_caught_up(cluster, "payments", timeout_s=30)
    directory = cluster.info.directory
    cluster_down(directory)
    _assert_replicas_identical(directory, "payments", 6)


def _wait_caught_up(cluster: Cluster, topic: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        partitions = cluster.describe(topic).partitions
        if all(len(p.replica_lag) == len(p.replicas) - 1 and not any(p.replica_lag.values()) for p in partitions):
            return
        time.sleep(0.1)
    raise AssertionError(f"followers of {topic} still behind after {timeout_s}s: {cluster.describe(topic)}")


def _assert_replicas_identical(directory: str, topic: str, partitions: int) -> None:
    """Identical logs, except that a leader elected while the cluster was stopping may have appended its
    term's first (empty) entry where the nodes already stopped could not get it."""
    info = load_cluster(directory)
    logs: dict[int, list[list[tuple[int, int, int, bytes]]]] = {}
    for node_id, node in info.nodes.items():
        with LogStore.open(Path(node.directory) / "data") as store:
            logs[node_id] = []
            for partition in range(partitions):
                log = store.log(topic, partition, create=False)
                entries = log.entries(log.first_index(), log.last_index() + 1)
                logs[node_id].append([(e.index, e.term, int(e.kind), e.payload) for e in entries])
    (first_node, first), *others = logs.items()
    for partition in range(partitions):
        for node_id, other in others:
            mine, theirs = first[partition], other[partition]
            common = min(len(mine), len(theirs))
            if mine[:common] != theirs[:common] or abs(len(mine) - len(theirs)) > 2:
                at = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), common)
                raise AssertionError(
                    f"{topic}/{partition} differs between nodes {first_node} ({len(mine)} entries) and {node_id} "
                    f"({len(theirs)} entries) from position {at}: "
                    f"{[e[:3] for e in mine[at : at + 3]]} vs {[e[:3] for e in theirs[at : at + 3]]}"
                )


def test_stopping_and_restarting_the_whole_cluster_keeps_data_and_topics(cluster: Cluster) -> None:
    cluster.create_topic("ledger", partitions=3, replication_factor=3, retention_ms="86400000")
    acked = {p: [produce(cluster.client, "ledger", p, record_values(p, s, 0, 4)) for s in range(50)] for p in range(3)}
    before = {p: fetch_all(cluster.client, "ledger", p) for p in range(3)}
    cluster.restart_all()
    described = cluster.describe("ledger")
    assert len(described.partitions) == 3 and described.configs["retention.ms"] == "86400000"
    for partition in range(3):
        assert fetch_all(cluster.client, "ledger", partition) == before[partition]
        assert acked[partition] == [4 * s for s in range(50)]
    produce(cluster.client, "ledger", 0, [b"after restart"])


def test_a_paused_follower_catches_up_and_does_not_depose_the_leader(cluster: Cluster) -> None:
    cluster.create_topic("audit", partitions=1, replication_factor=3)
    leader = cluster.leader("audit", 0)
    term = cluster.describe("audit").partitions[0].leader_epoch
    follower = next(n for n in cluster.info.nodes if n != leader)
    pid = cluster.info.nodes[follower].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        for sequence in range(200):
            produce(cluster.client, "audit", 0, record_values(0, sequence, 0, 2))
        time.sleep(1.5)  # several election timeouts pass while the follower is frozen
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        partition = cluster.describe("audit").partitions[0]
        if follower in partition.in_sync_replicas:
            break
        time.sleep(0.1)
    partition = cluster.describe("audit").partitions[0]
    assert follower in partition.in_sync_replicas, "the follower did not catch up"
    assert (partition.leader, partition.leader_epoch) == (leader, term), "the returning follower caused an election"


def test_retention_drops_old_segments_on_every_replica_even_of_an_idle_partition(cluster: Cluster) -> None:
    cluster.create_topic(
        "clicks",
        partitions=2,
        replication_factor=3,
        retention_ms="1500",
        segment_ms="300",
        segment_bytes="4096",
    )
    for sequence in range(30):
        produce(cluster.client, "clicks", 0, record_values(0, sequence, 0, 5))
    produce(cluster.client, "clicks", 1, record_values(1, 0, 0, 5))  # then partition 1 stays idle
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        partitions = cluster.describe("clicks").partitions
        if partitions[0].log_start_offset > 0 and partitions[1].log_start_offset > 0:
            break
        time.sleep(0.2)
    partitions = cluster.describe("clicks").partitions
    assert partitions[0].log_start_offset > 0, "retention never dropped the busy partition's old segments"
    assert partitions[1].log_start_offset == 5, "retention never fired on the idle partition"
    ends = {p.partition: p.log_start_offset for p in partitions}

    directory = cluster.info.directory
    cluster_down(directory)
    for node in load_cluster(directory).nodes.values():
        with LogStore.open(Path(node.directory) / "data") as store:
            for partition in range(2):
                assert store.log("clicks", partition, create=False).start_offset() >= ends[partition] - 5 * 30
    _assert_same_segments(directory, "clicks", 2)


def _assert_same_segments(directory: str, topic: str, partitions: int) -> None:
    layouts = []
    for node in load_cluster(directory).nodes.values():
        with LogStore.open(Path(node.directory) / "data") as store:
            layouts.append(
                [
                    [(s.base_index, s.last_index) for s in store.log(topic, p, create=False).segments()[:-1]]
                    for p in range(partitions)
                ]
            )
    assert all(layout == layouts[0] for layout in layouts), "replicas dropped or cut different segments"


def test_leadership_returns_to_the_preferred_leader_once_it_is_back_and_caught_up(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # Hand-back runs on its own schedule: with retention checks an hour apart it must still happen.
    cluster = cluster_factory(leader_balance_ms=300, retention_check_ms=3_600_000)
    topic = cluster.create_topic("balanced", partitions=3, replication_factor=3)
    preferred = {p.partition: p.preferred_leader for p in topic.partitions}
    victim = preferred[0]
    cluster.kill(victim)
    produce(cluster.client, "balanced", 0, [b"written while the preferred leader was away"])
    assert cluster.leader("balanced", 0) != victim
    cluster.start(victim)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        leaders = {p.partition: p.leader for p in cluster.describe("balanced").partitions}
        if leaders == preferred:
            break
        time.sleep(0.2)
    assert leaders == preferred


def test_deleting_a_topic_removes_its_groups_and_data_and_the_name_can_be_reused(cluster: Cluster) -> None:
    cluster.create_topic("scratch", partitions=2, replication_factor=3)
    for sequence in range(20):
        produce(cluster.client, "scratch", sequence % 2, record_values(0, sequence, 0, 3))
    stub = cluster.client.admin_stub(cluster.info.nodes[2].client_address)
    stub.DeleteTopic(pb.DeleteTopicRequest(name="scratch"), timeout=30)
    assert "scratch" not in [t.name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics]
    cluster.create_topic("scratch", partitions=1, replication_factor=3)
    assert fetch_all(cluster.client, "scratch", 0) == []
    produce(cluster.client, "scratch", 0, [b"fresh"])
    directory = cluster.info.directory
    cluster_down(directory)
    for node in load_cluster(directory).nodes.values():
        with LogStore.open(Path(node.directory) / "data") as store:
            assert sorted(p for t, p in store.logs() if t == "scratch") == [0]
            assert store.log("scratch", 0, create=False).next_offset() == 1


def test_an_idle_partition_stays_in_sync_and_a_killed_node_shows_as_dead(cluster: Cluster) -> None:
    cluster.create_topic("quiet", partitions=2, replication_factor=3)
    produce(cluster.client, "quiet", 0, [b"one"])
    time.sleep(2)  # long enough for the groups to go quiescent (no heartbeats)
    assert all(sorted(p.in_sync_replicas) == [1, 2, 3] for p in cluster.describe("quiet").partitions)

    cluster.kill(3)
    stub = cluster.client.admin_stub(cluster.info.nodes[1].client_address)
    deadline = time.monotonic() + 10
    states: dict[int, str] = {}
    while time.monotonic() < deadline:
        states = {n.node_id: n.state for n in stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=10).nodes}
        if states.get(3) == "dead":  # as the member-list declares it
            break
        time.sleep(0.1)
    assert states == {1: "alive", 2: "alive", 3: "dead"}
