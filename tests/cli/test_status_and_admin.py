"""`multiraft status` and the Admin calls behind it: offsets, consumer groups and lag, replica health."""

from __future__ import annotations

import json
import time

import pytest

from multiraft import Admin, TopicPartition
from multiraft.errors import UnknownPartitionError, UnknownTopicError
from rpc.proto import multiraft_pb2 as pb
from storage import encode_batch
from tests.cli._helpers import invoke, invoked, ok, one_error_line, run_cli
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration


def _produce(cluster: Cluster, topic: str, partition: int, count: int, timestamp_ms: int) -> int:
    request = pb.ProduceRequest(
        topic=topic,
        partition=partition,
        batch=encode_batch([b"v%d" % i for i in range(count)], timestamps_ms=timestamp_ms),
    )
    response = cluster.client.call_leader(
        topic, partition, lambda stub, timeout: stub.Produce(request, timeout=timeout)
    )
    return response.base_offset


def _commit(cluster: Cluster, group: str, offsets: dict[tuple[str, int], int]) -> None:
    request = pb.CommitOffsetsRequest(
        group=group, offsets=[pb.CommittedOffset(topic=t, partition=p, offset=o) for (t, p), o in offsets.items()]
    )
    address = next(iter(cluster.client.metadata().nodes.values()))
    cluster.client.log_stub(address).CommitOffsets(request, timeout=10)


def test_list_offsets_answers_earliest_latest_and_by_timestamp(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("clock", 3, 3)
    for partition in range(3):
        _produce(shared_cluster, "clock", partition, 2, timestamp_ms=1_000)
        _produce(shared_cluster, "clock", partition, partition + 1, timestamp_ms=2_000)
    with Admin(shared_cluster.bootstrap) as admin:
        assert admin.list_offsets("clock", "earliest") == {0: 0, 1: 0, 2: 0}
        assert admin.list_offsets("clock", "latest") == {0: 3, 1: 4, 2: 5}
        assert admin.list_offsets("clock", 1_500) == {0: 2, 1: 2, 2: 2}
        assert admin.list_offsets("clock", 0, partitions=[2]) == {2: 0}
        assert admin.list_offsets("clock", 9_999, partitions=[0, 1]) == {0: -1, 1: -1}
        with pytest.raises(UnknownPartitionError):
            admin.list_offsets("clock", "latest", partitions=[3])
        with pytest.raises(UnknownTopicError):
            admin.list_offsets("no-such-topic", "earliest")


def test_group_offsets_and_lag_count_what_is_left_to_consume(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("lagging", 2, 3)
    _produce(shared_cluster, "lagging", 0, 10, timestamp_ms=1_000)
    _produce(shared_cluster, "lagging", 1, 4, timestamp_ms=1_000)
    _commit(shared_cluster, "billing", {("lagging", 0): 7, ("lagging", 1): 4})
    with Admin(shared_cluster.bootstrap) as admin:
        assert "billing" in admin.list_groups()
        assert admin.group_offsets("billing") == {TopicPartition("lagging", 0): 7, TopicPartition("lagging", 1): 4}
        assert admin.group_lag("billing") == {TopicPartition("lagging", 0): 3, TopicPartition("lagging", 1): 0}
        assert admin.group_offsets("never-committed") == {}

    status = json.loads(invoked(invoke("status", "--json", bootstrap=shared_cluster.bootstrap)))
    rows = {
        (g["topic"], g["partition"]): (g["committed"], g["lag"]) for g in status["groups"] if g["group"] == "billing"
    }
    assert rows == {("lagging", 0): (7, 3), ("lagging", 1): (4, 0)}
    table = invoked(invoke("status", bootstrap=shared_cluster.bootstrap))
    assert "consumer groups" in table and "billing" in table


def test_status_lists_every_node_and_partition(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("inventory", 4, 3)
    status = json.loads(invoked(invoke("status", "--json", bootstrap=shared_cluster.bootstrap)))
    nodes = {n["node_id"]: n for n in status["nodes"]}
    assert sorted(nodes) == [1, 2, 3]
    assert {n["address"] for n in nodes.values()} == set(shared_cluster.bootstrap.split(","))
    assert status["controller_id"] in nodes and nodes[status["controller_id"]]["controller"]
    topics = {t["name"]: t for t in status["topics"]}
    inventory = topics["inventory"]["partitions"]
    assert [p["partition"] for p in inventory] == [0, 1, 2, 3]
    for partition in inventory:
        assert partition["leader"] in partition["replicas"]
        assert partition["under_replicated"] is False
        assert sorted(partition["replica_lag"]) == sorted(
            str(n) for n in partition["replicas"] if n != partition["leader"]
        )
    assert sum(n["leaders"] for n in nodes.values()) == sum(len(t["partitions"]) for t in status["topics"])

    table = invoked(invoke("status", bootstrap=shared_cluster.bootstrap))
    for heading in ("nodes", "partitions", "controller leader: node", "(controller)", "replica lag", "ISR"):
        assert heading in table
    lines = table.splitlines()
    for node_id, node in nodes.items():
        assert any(node["address"] in line and str(node_id) in line for line in lines)
    assert sum(1 for line in lines if " inventory " in line) == 4


def test_a_dead_leader_shows_as_under_replicated_and_offsets_still_answer(cluster: Cluster) -> None:
    cluster.create_topic("fragile", 3, 3)
    for partition in range(3):
        _produce(cluster, "fragile", partition, 5, timestamp_ms=1_000)
    victim = cluster.leader("fragile", 0)
    with Admin(cluster.bootstrap, request_timeout_s=20) as admin:
        admin.list_offsets("fragile", "latest")  # caches the leaders the victim is one of
        cluster.kill(victim)
        assert admin.list_offsets("fragile", "latest") == {0: 5, 1: 5, 2: 5}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            partition = admin.describe_topic("fragile").partitions[0]
            if partition.leader and victim not in partition.in_sync_replicas:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"partition 0 still lists node {victim} in its ISR: {partition}")
    status = json.loads(invoked(invoke("status", "--json", bootstrap=cluster.bootstrap)))
    fragile = next(t for t in status["topics"] if t["name"] == "fragile")
    assert fragile["partitions"][0]["under_replicated"] is True
    table = invoked(invoke("topic", "describe", "fragile", bootstrap=cluster.bootstrap))
    assert "under-replicated" in table


def test_node_drain_is_refused_when_a_topic_would_lack_nodes_unless_forced_and_undrain_takes_it_back(
    cluster: Cluster,
) -> None:
    cluster.create_topic("everywhere", 1, 3)
    refused = one_error_line(run_cli("node", "drain", "3", "--no-wait", bootstrap=cluster.bootstrap))
    assert "DRAIN_REFUSED" in refused and "everywhere" in refused
    forced = ok(run_cli("node", "drain", "3", "--no-wait", "--force", bootstrap=cluster.bootstrap))
    assert "node 3 draining" in forced
    assert ok(run_cli("node", "undrain", "3", bootstrap=cluster.bootstrap)).strip() == "node 3 active"
    with Admin(cluster.bootstrap, request_timeout_s=20) as admin:
        assert next(n.state for n in admin.describe_cluster().nodes if n.node_id == 3) != "draining"
