"""Producer ids and epochs come from the controller: a client cannot make them up (Kafka's UNKNOWN_PRODUCER_ID
and INVALID_PRODUCER_EPOCH), so it can neither fence another producer nor write ahead under an id nobody was
given. Each batch here is sent raw, straight to the partition leader."""

from __future__ import annotations

import time

import grpc
import pytest

from multiraft.errors import InvalidProducerEpochError, MultiraftError, UnknownProducerIdError
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_rpc_error
from storage import encode_batch
from tests.integration._helpers import Cluster, fetch_all

pytestmark = pytest.mark.integration


def _init_producer(cluster: Cluster) -> int:
    stub = cluster.client.log_stub(cluster.info.nodes[1].client_address)
    response = stub.InitProducer(pb.InitProducerRequest(), timeout=30)  # type: ignore[attr-defined]
    assert response.producer_epoch == 0
    return int(response.producer_id)


def _batch(producer_id: int, epoch: int, sequence: int, tag: bytes, count: int = 3) -> bytes:
    values = [b"%s:%d" % (tag, sequence + i) for i in range(count)]
    return encode_batch(
        values, timestamps_ms=int(time.time() * 1000), producer_id=producer_id, producer_epoch=epoch,
        base_sequence=sequence,
    )  # fmt: skip


def _produce(cluster: Cluster, topic: str, batch: bytes) -> pb.ProduceResponse | MultiraftError:
    """One Produce on the partition's leader, no retries: the answer or the error it was refused with."""
    leader = cluster.leader(topic, 0)
    stub = cluster.client.log_stub(cluster.info.nodes[leader].client_address)
    try:
        response: pb.ProduceResponse = stub.Produce(  # type: ignore[attr-defined]
            pb.ProduceRequest(topic=topic, partition=0, batch=batch), timeout=30
        )
    except grpc.RpcError as exc:
        return from_rpc_error(exc)
    return response


def test_a_raw_produce_under_a_producer_id_nobody_handed_out_is_refused(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("grants-unknown", partitions=1, replication_factor=3)
    handed_out = _init_producer(shared_cluster)
    for made_up in (handed_out + 10_000_000, 0):
        refused = _produce(shared_cluster, "grants-unknown", _batch(made_up, 0, 0, b"forged"))
        assert isinstance(refused, UnknownProducerIdError), refused
    assert fetch_all(shared_cluster.client, "grants-unknown", 0) == []


def test_an_epoch_initproducer_never_granted_cannot_fence_a_producer_whose_next_batch_is_written(
    shared_cluster: Cluster,
) -> None:
    topic = "grants-fence"
    shared_cluster.create_topic(topic, partitions=1, replication_factor=3)
    victim = _init_producer(shared_cluster)
    first = _produce(shared_cluster, topic, _batch(victim, 0, 0, b"victim"))
    assert isinstance(first, pb.ProduceResponse) and not first.duplicate

    # A forger who guessed the victim's id tries a higher epoch (which would fence it), then its next sequence.
    fence = _produce(shared_cluster, topic, _batch(victim, 1, 3, b"forged"))
    assert isinstance(fence, InvalidProducerEpochError), fence

    second = _produce(shared_cluster, topic, _batch(victim, 0, 3, b"victim"))
    assert isinstance(second, pb.ProduceResponse), second
    assert (second.base_offset, second.duplicate) == (3, False)
    values = [value for _, value in fetch_all(shared_cluster.client, topic, 0)]
    assert values == [b"victim:%d" % i for i in range(6)]
