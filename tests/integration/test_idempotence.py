"""Idempotent produce on the wire: the leader writes a retried batch once, across leader changes and restarts."""

from __future__ import annotations

import time

import pytest

from multiraft.errors import OutOfOrderSequenceError
from rpc.proto import multiraft_pb2 as pb
from storage import encode_batch
from tests.integration._helpers import Cluster, fetch_all

pytestmark = pytest.mark.integration


def _init_producer(cluster: Cluster, node_id: int = 1) -> int:
    stub = cluster.client.log_stub(cluster.info.nodes[node_id].client_address)
    response = stub.InitProducer(pb.InitProducerRequest(), timeout=30)
    assert response.producer_epoch == 0
    return int(response.producer_id)


def _batch(producer_id: int, sequence: int, count: int = 3) -> bytes:
    values = [b"p%d:seq%d" % (producer_id, sequence + i) for i in range(count)]
    return encode_batch(
        values,
        timestamps_ms=int(time.time() * 1000),
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    )


def _send(cluster: Cluster, topic: str, batch: bytes, partition: int = 0) -> pb.ProduceResponse:
    """Send a batch to the partition's current leader (retrying only NOT_LEADER and unreachable nodes: the
    batch is idempotent, which is the point)."""
    request = pb.ProduceRequest(topic=topic, partition=partition, batch=batch)
    response: pb.ProduceResponse = cluster.client.call_leader(
        topic, partition, lambda stub, timeout: stub.Produce(request, timeout=timeout), timeout_s=30
    )
    return response


def test_a_retried_batch_is_answered_with_its_first_offset_and_written_once(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("idem-retry", partitions=1, replication_factor=3)
    producer = _init_producer(shared_cluster)
    first = _send(shared_cluster, "idem-retry", _batch(producer, 0))
    again = _send(shared_cluster, "idem-retry", _batch(producer, 0))
    following = _send(shared_cluster, "idem-retry", _batch(producer, 3))
    once_more = _send(shared_cluster, "idem-retry", _batch(producer, 0))
    assert (first.base_offset, first.duplicate) == (0, False)
    assert (again.base_offset, again.duplicate) == (0, True)
    assert (following.base_offset, following.duplicate) == (3, False)
    assert (once_more.base_offset, once_more.duplicate) == (0, True)
    assert [offset for offset, _ in fetch_all(shared_cluster.client, "idem-retry", 0)] == list(range(6))


def test_a_sequence_gap_is_refused_and_names_the_expected_sequence(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("idem-gap", partitions=1, replication_factor=3)
    producer = _init_producer(shared_cluster)
    _send(shared_cluster, "idem-gap", _batch(producer, 0, count=4))
    with pytest.raises(OutOfOrderSequenceError) as raised:
        _send(shared_cluster, "idem-gap", _batch(producer, 10))
    assert raised.value.metadata["expected_sequence"] == "4"
    assert len(fetch_all(shared_cluster.client, "idem-gap", 0)) == 4


def test_every_node_hands_out_distinct_producer_ids(shared_cluster: Cluster) -> None:
    ids = [_init_producer(shared_cluster, node) for node in (1, 2, 3) for _ in range(5)]
    assert len(set(ids)) == len(ids)
    assert min(ids) >= 1


def test_sequences_are_tracked_per_partition(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("idem-partitions", partitions=2, replication_factor=3)
    producer = _init_producer(shared_cluster)
    assert _send(shared_cluster, "idem-partitions", _batch(producer, 0), partition=0).base_offset == 0
    assert _send(shared_cluster, "idem-partitions", _batch(producer, 0), partition=1).duplicate is False


def test_a_new_leader_recognises_a_retry_of_a_batch_the_old_leader_wrote(cluster: Cluster) -> None:
    cluster.create_topic("idem-failover", partitions=1, replication_factor=3)
    producer = _init_producer(cluster)
    for sequence in range(0, 30, 3):
        _send(cluster, "idem-failover", _batch(producer, sequence))
    old_leader = cluster.leader("idem-failover", 0)
    cluster.kill(old_leader)
    retry = _send(cluster, "idem-failover", _batch(producer, 27))
    assert (retry.base_offset, retry.duplicate) == (27, True)
    assert _send(cluster, "idem-failover", _batch(producer, 30)).base_offset == 30
    cluster.start(old_leader)
    assert [offset for offset, _ in fetch_all(cluster.client, "idem-failover", 0)] == list(range(33))


def test_producer_state_survives_a_restart_of_the_whole_cluster(cluster: Cluster) -> None:
    cluster.create_topic("idem-restart", partitions=1, replication_factor=3)
    producer = _init_producer(cluster)
    for sequence in range(0, 15, 3):
        _send(cluster, "idem-restart", _batch(producer, sequence))
    cluster.restart_all()
    retry = _send(cluster, "idem-restart", _batch(producer, 12))
    assert (retry.base_offset, retry.duplicate) == (12, True)
    with pytest.raises(OutOfOrderSequenceError):
        _send(cluster, "idem-restart", _batch(producer, 18))
    assert len(fetch_all(cluster.client, "idem-restart", 0)) == 15
