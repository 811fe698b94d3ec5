"""The member-list drives the controller: a killed node's replicas are re-created, a new node gets its share,
a drained node ends up empty. Real processes on 127.0.0.1, with the member-list's ``local`` timings."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable

import pytest

from multiraft import Admin, ClusterInfo
from multiraft.errors import NodeHasReplicasError, NotLeaderError
from multiraft.node.replicas.offsets import SNAPSHOT_EVERY
from multiraft.tools.launcher import add_node
from rpc.proto import multiraft_pb2 as pb
from tests.integration._helpers import BackgroundProducer, Cluster, fetch_all, produce
from tests.integration._helpers import wait_for as _wait

pytestmark = pytest.mark.integration

HEALING = {
    "membership_profile": "local",
    "replica_replace_after_ms": 1_000,
    "rebalance_interval_ms": 200,
    "max_concurrent_moves": 4,
}
TOPIC, PARTITIONS, RF = "events", 12, 3


def _state_of(admin: Admin, node_id: int) -> str:
    return next(n.state for n in admin.describe_cluster().nodes if n.node_id == node_id)


def _fully_replicated_on(cluster: Cluster, live: set[int]) -> bool:
    topic = cluster.describe(TOPIC)
    return all(
        len(p.replicas) == RF and set(p.replicas) <= live and set(p.in_sync_replicas) == set(p.replicas) and p.leader
        for p in topic.partitions
    )


def _a_follower_node(cluster: Cluster, admin: Admin) -> int:
    """A node that is not the controller leader (killing the controller is tested by the Raft layer)."""
    controller = admin.describe_cluster().controller_id
    return max(n for n in cluster.info.nodes if n != controller)


def _check_exactly_once(cluster: Cluster, producer: BackgroundProducer) -> int:
    """Every acknowledged record is stored once, at the offset it was acknowledged at; returns the count."""
    acknowledged = 0
    for partition in range(PARTITIONS):
        records = fetch_all(cluster.client, TOPIC, partition)
        stored = dict(records)
        counts = Counter(value for _, value in records)
        for offset, values in producer.acked.get(partition, []):
            for position, value in enumerate(values):
                assert counts[value] == 1, f"{value!r} stored {counts[value]} times"
                assert stored[offset + position] == value
                acknowledged += 1
        assert all(value in producer.attempted for value in counts), "a record nobody sent"
    return acknowledged


def _only_retried_errors(producer: BackgroundProducer) -> None:
    # The producer retries every failure with a new attempt; what it may see is a leader change or a node
    # that went away, never a refusal or a loss.
    unexpected = [e for e in producer.errors if not (e.retriable or isinstance(e, NotLeaderError))]
    assert not unexpected, unexpected[:5]


def _spread(cluster_info: ClusterInfo, nodes: set[int]) -> tuple[list[int], list[int]]:
    loads = {load.node_id: load for load in cluster_info.loads}
    return [loads[n].replicas for n in sorted(nodes)], [loads[n].leaders for n in sorted(nodes)]


def test_a_killed_node_is_replaced_and_no_acknowledged_record_is_lost(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(5, **HEALING)
    cluster.create_topic(TOPIC, PARTITIONS, RF)
    with Admin(cluster.client) as admin:
        victim = _a_follower_node(cluster, admin)
        producer = BackgroundProducer(cluster.client, TOPIC, PARTITIONS).start()
        try:
            _wait(lambda: producer.acked_count() >= 2 * PARTITIONS, 30, "first acknowledgements")
            cluster.kill(victim)
            killed_at = time.monotonic()
            _wait(
                lambda: next(n.state for n in admin.describe_cluster().nodes if n.node_id == victim) == "dead",
                20,
                "the killed node declared dead",
                poll_s=0.1,
            )
            live = set(cluster.info.nodes) - {victim}
            _wait(lambda: _fully_replicated_on(cluster, live), 60, "every partition back to 3 in-sync replicas")
            restored_s = time.monotonic() - killed_at
            acked_before = producer.acked_count()
            _wait(lambda: producer.acked_count() > acked_before + PARTITIONS, 30, "producing after the repair")
        finally:
            producer.stop()
        # A balancing move may follow the repair; each of its steps leaves the replicas in sync in the end.
        _wait(lambda: not admin.describe_cluster().under_replicated, 60, "no partition under-replicated")
        assert _check_exactly_once(cluster, producer) > 0
        _only_retried_errors(producer)
        assert restored_s < 60


def test_replacements_that_copy_sealed_segments_are_promoted_once_installed(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Regression: the leader reported a finished segment copy for 30 s after its last chunk, and the
    rebalancer promotes no learner with a copy reported, so every repair by segment copy took ~30 s more."""
    cluster = cluster_factory(5, **HEALING)
    topic, partitions = "sealed", 3
    cluster.create_topic(topic, partitions, RF, segment_bytes=str(256 * 1024))
    for partition in range(partitions):
        for sequence in range(25):  # ~1 MB in 40 KB batches: three or four sealed segments
            produce(cluster.client, topic, partition, [b"x" * 1000 + b"%d:%d" % (sequence, r) for r in range(40)])
    with Admin(cluster.client) as admin:
        victim = _a_follower_node(cluster, admin)
        moved = [p.partition for p in cluster.describe(topic).partitions if victim in p.replicas]
        cluster.kill(victim)
        killed_at = time.monotonic()
        live = set(cluster.info.nodes) - {victim}

        def restored() -> bool:
            described = cluster.describe(topic)
            return not admin.describe_cluster().moves and all(
                len(p.replicas) == RF and set(p.replicas) <= live and set(p.in_sync_replicas) == set(p.replicas)
                for p in described.partitions
            )

        _wait(restored, 60, "every partition back to 3 in-sync replicas", poll_s=0.1)
        restored_s = time.monotonic() - killed_at
    installed = "".join(cluster.info.nodes[n].log_path.read_text(errors="replace") for n in live)
    for partition in moved:  # each replacement caught up by copying segments, not by replaying entries
        found = re.search(rf"catch-up installed.* topic={topic} partition={partition} ", installed)
        assert found, f"partition {partition} was not caught up by a segment copy"
    # Detection (~2 s) + replace_after (1 s) + the copies: well under the 30 s the stale report added.
    assert restored_s < 20, f"restored after {restored_s:.1f}s"


def test_a_new_node_gets_its_share_of_replicas_and_leaders(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(5, **HEALING)
    cluster.create_topic(TOPIC, PARTITIONS, RF)
    add_node(cluster.info, 6)
    nodes = set(cluster.info.nodes)
    assert nodes == {1, 2, 3, 4, 5, 6}
    with Admin(cluster.client) as admin:

        def balanced() -> bool:
            described = admin.describe_cluster()
            replicas, leaders = _spread(described, nodes)
            return (
                not described.moves
                and max(replicas) - min(replicas) <= 1
                and max(leaders) - min(leaders) <= 1
                and _fully_replicated_on(cluster, nodes)
            )

        _wait(balanced, 90, "replica and leader counts within 1 of each other")
        replicas, _ = _spread(admin.describe_cluster(), nodes)
        assert sum(replicas) == PARTITIONS * RF
        assert replicas[-1] >= PARTITIONS * RF // len(nodes) - 1  # the new node holds its share


def test_a_drained_node_ends_up_empty_and_only_then_can_be_removed(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(5, **HEALING)
    cluster.create_topic(TOPIC, PARTITIONS, RF)
    with Admin(cluster.client) as admin:
        drained = _a_follower_node(cluster, admin)
        with pytest.raises(NodeHasReplicasError):
            admin.remove_node(drained)
        producer = BackgroundProducer(cluster.client, TOPIC, PARTITIONS).start()
        try:
            _wait(lambda: producer.acked_count() >= 2 * PARTITIONS, 30, "first acknowledgements")
            first = admin.drain_node(drained)
            assert first.replicas_left > 0 and not first.safe_to_stop
            with pytest.raises(NodeHasReplicasError):
                admin.remove_node(drained)
            _wait(lambda: admin.drain_node(drained).safe_to_stop, 90, "the drained node safe to stop")
            acked_before = producer.acked_count()
            _wait(lambda: producer.acked_count() > acked_before + PARTITIONS, 30, "producing after the drain")
        finally:
            producer.stop()
        described = admin.describe_cluster()
        assert {load.node_id: load.replicas for load in described.loads}[drained] == 0
        assert next(n.state for n in described.nodes if n.node_id == drained) == "draining"
        remaining = set(cluster.info.nodes) - {drained}
        _wait(lambda: _fully_replicated_on(cluster, remaining), 30, "every partition on the other nodes")
        assert _check_exactly_once(cluster, producer) > 0
        _only_retried_errors(producer)
        admin.remove_node(drained)
        # Any node answers DescribeCluster: one that has not applied the removal yet still says draining.
        _wait(lambda: _state_of(admin, drained) == "removed", 10, "the drained node removed", poll_s=0.1)


def _commit_offset(cluster: Cluster, group: str, topic: str, offset: int) -> None:
    request = pb.CommitOffsetsRequest(
        group=group, offsets=[pb.CommittedOffset(topic=topic, partition=0, offset=offset, metadata="m")]
    )
    stub = cluster.client.log_stub(cluster.info.nodes[1].client_address)
    stub.CommitOffsets(request, timeout=30)  # type: ignore[attr-defined]


def test_a_drain_onto_a_new_node_moves_the_idle_offsets_partitions_too(cluster_factory: Callable[..., Cluster]) -> None:
    """Regression (nemesis ``churn``): the moves of idle ``__consumer_offsets`` partitions to a new node never
    left phase ``adding`` (their leaders reported no status), held every move slot, and the drain never ended."""
    cluster = cluster_factory(3, **HEALING)
    cluster.create_topic(TOPIC, 3, RF)
    _commit_offset(cluster, "billing", TOPIC, 7)  # creates __consumer_offsets: 8 idle groups on every node
    for offset in range(8, 8 + SNAPSHOT_EVERY + 50):  # billing's group snapshots and compacts its log: its new
        _commit_offset(cluster, "billing", TOPIC, offset)  # replica is caught up by a Raft snapshot of the map
    last = 8 + SNAPSHOT_EVERY + 49
    with Admin(cluster.client) as admin:
        drained = _a_follower_node(cluster, admin)  # one of the first three, not the controller leader
        add_node(cluster.info, 4)
        _wait(lambda: admin.drain_node(drained).safe_to_stop, 120, "the drained node safe to stop")
        described = admin.describe_cluster()
        assert {load.node_id: load.replicas for load in described.loads}[drained] == 0
        cluster.kill(drained)  # stopped, as it is once safe: it answers no DescribeCluster with its stale state
        _wait(lambda: _removed(admin, drained), 60, "the drained node removed")
    fetch = pb.FetchOffsetsRequest(group="billing", partitions=[pb.TopicPartition(topic=TOPIC, partition=0)])
    stub = cluster.client.log_stub(cluster.info.nodes[4].client_address)
    (committed,) = stub.FetchOffsets(fetch, timeout=30).offsets  # type: ignore[attr-defined]
    assert committed.offset == last


def test_draining_controller_voters_one_after_another_keeps_the_metadata_quorum(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Regression (nemesis ``churn``): the controller's voters stayed as bootstrapped, so once two drained
    voters were stopped the metadata had no quorum left and nothing could be created, drained or removed."""
    cluster = cluster_factory(3, **HEALING)
    cluster.create_topic(TOPIC, 3, RF)
    with Admin(cluster.client) as admin:
        add_node(cluster.info, 4)
        add_node(cluster.info, 5)
        gone: set[int] = set()
        for _ in range(2):  # two of the three bootstrapped voters, never the controller leader
            controller = admin.describe_cluster().controller_id
            drained = min(n for n in (1, 2, 3) if n != controller and n not in gone)
            _wait(lambda: admin.drain_node(drained).safe_to_stop, 120, f"node {drained} safe to stop")  # noqa: B023
            cluster.kill(drained)
            gone.add(drained)
            _wait(lambda: _removed(admin, drained), 60, f"node {drained} removed")  # noqa: B023
        cluster.create_topic("after", 1, 2)  # the metadata still commits
        assert cluster.leader("after", 0)


def _removed(admin: Admin, node_id: int) -> bool:
    admin.remove_node(node_id)
    return next(n.state for n in admin.describe_cluster().nodes if n.node_id == node_id) == "removed"
