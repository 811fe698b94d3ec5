"""ProduceStream (ordered, pipelined acknowledgements) and Subscribe (committed batches pushed as they commit)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from rpc.proto import multiraft_pb2 as pb
from storage import decode_batches, encode_batch
from tests.integration._helpers import Cluster, fetch_all

pytestmark = pytest.mark.integration


def _leader_stub(cluster: Cluster, topic: str, partition: int = 0) -> object:
    return cluster.client.log_stub(cluster.info.nodes[cluster.leader(topic, partition)].client_address)


def test_produce_stream_answers_in_request_order_and_a_bad_batch_fails_alone(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("stream-order", partitions=2, replication_factor=3)
    leader = shared_cluster.leader("stream-order", 0)
    partition_on_leader = [p for p in (0, 1) if shared_cluster.leader("stream-order", p) == leader]

    def requests() -> Iterator[pb.ProduceRequest]:
        for sequence in range(200):
            batch = encode_batch([b"r%d" % sequence], timestamps_ms=int(time.time() * 1000))
            if sequence == 57:
                batch = batch[:-1] + bytes([batch[-1] ^ 0xFF])  # a flipped bit: the CRC fails
            yield pb.ProduceRequest(
                topic="stream-order", partition=partition_on_leader[0], batch=batch, sequence=sequence
            )

    stub = shared_cluster.client.log_stub(shared_cluster.info.nodes[leader].client_address)
    responses = list(stub.ProduceStream(requests(), timeout=60))
    assert [r.sequence for r in responses] == list(range(200))
    assert responses[57].error.reason == "CORRUPT_BATCH"
    good = [r for r in responses if not r.error.reason]
    assert [r.base_offset for r in good] == list(range(199))
    values = [v for _, v in fetch_all(shared_cluster.client, "stream-order", partition_on_leader[0])]
    assert values == [b"r%d" % s for s in range(200) if s != 57]


def test_produce_stream_reports_not_leader_per_item_on_a_follower(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("stream-follower", partitions=1, replication_factor=3)
    leader = shared_cluster.leader("stream-follower", 0)
    follower = next(n for n in shared_cluster.info.nodes if n != leader)
    stub = shared_cluster.client.log_stub(shared_cluster.info.nodes[follower].client_address)
    batch = encode_batch([b"x"], timestamps_ms=1)
    request = pb.ProduceRequest(topic="stream-follower", partition=0, batch=batch, sequence=7)
    (response,) = list(stub.ProduceStream(iter([request]), timeout=30))
    assert response.sequence == 7
    assert response.error.reason == "NOT_LEADER"
    assert response.error.metadata["leader_id"] == str(leader)


def test_subscribe_pushes_batches_as_they_commit(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("stream-subscribe", partitions=1, replication_factor=3)
    stub = _leader_stub(shared_cluster, "stream-subscribe")
    stream = stub.Subscribe(  # type: ignore[attr-defined]
        pb.SubscribeRequest(topic="stream-subscribe", partition=0, offset=0), timeout=30
    )
    received: list[bytes] = []
    done = threading.Event()

    def consume() -> None:
        try:
            for response in stream:
                assert not response.error.reason, response.error
                received.extend(decode_batches(response.batches).column("value").to_pylist())
                if len(received) >= 20:
                    done.set()
                    return
        except grpc.RpcError:
            pass

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producer_stub = _leader_stub(shared_cluster, "stream-subscribe")
    for i in range(20):
        batch = encode_batch([b"m%d" % i], timestamps_ms=int(time.time() * 1000))
        producer_stub.Produce(  # type: ignore[attr-defined]
            pb.ProduceRequest(topic="stream-subscribe", partition=0, batch=batch), timeout=30
        )
    assert done.wait(30), f"received only {received}"
    stream.cancel()
    reader.join(10)
    assert received == [b"m%d" % i for i in range(20)]


def test_subscribe_beyond_the_log_ends_with_offset_out_of_range(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("stream-range", partitions=1, replication_factor=3)
    stub = _leader_stub(shared_cluster, "stream-range")
    responses = list(
        stub.Subscribe(  # type: ignore[attr-defined]
            pb.SubscribeRequest(topic="stream-range", partition=0, offset=99), timeout=30
        )
    )
    assert len(responses) == 1
    assert responses[0].error.reason == "OFFSET_OUT_OF_RANGE"
    assert responses[0].error.metadata["high_watermark"] == "0"
