"""Requests of a hostile scale against a live 3-node cluster: each is answered with a precise error naming the
field (or clamped, as Kafka clamps a fetch), and the node that got it keeps serving.

Before issue 13 a node worked through a million partition ids or topic names on its event loop, answered
with whatever gRPC made of an oversized response, and a Fetch asking for 2 GiB read the whole partition into
one answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from multiraft.errors import InvalidArgumentError
from multiraft.tools.launcher import cluster_status
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import from_rpc_error
from storage import encode_batch
from tests.integration._helpers import Cluster, produce

pytestmark = pytest.mark.integration

TOPIC = "limits"
BIG = "limits-big"
MiB = 1024 * 1024
FETCH_LIMIT = 16 * MiB  # NodeConfig.fetch_max_bytes_limit's default
BIG_BATCH = 3 * MiB


@pytest.fixture(scope="module")
def limited(shared_cluster: Cluster) -> Iterator[Cluster]:
    shared_cluster.create_topic(TOPIC, partitions=2, replication_factor=3)
    produce(shared_cluster.client, TOPIC, 0, [b"kept"])
    yield shared_cluster
    nodes = cluster_status(shared_cluster.info.directory)
    assert all(node["serving"] for node in nodes), f"a node stopped serving: {nodes}"


def _leader_address(cluster: Cluster, topic: str, partition: int) -> str:
    return cluster.info.nodes[cluster.leader(topic, partition)].client_address


def _refusal(call: Any) -> InvalidArgumentError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    failure: Any = caught.value
    assert failure.code() == grpc.StatusCode.INVALID_ARGUMENT, failure.details()
    error = from_rpc_error(failure)
    assert isinstance(error, InvalidArgumentError)
    return error


def _still_serving(cluster: Cluster, address: str) -> None:
    """The node at ``address`` answers, the committed record is there, and every node serves."""
    answer = cluster.client.admin_stub(address).Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=30)
    assert [t.name for t in answer.topics] == [TOPIC]
    request = pb.ListOffsetsRequest(topic=TOPIC, partitions=[0], spec=pb.LATEST)
    offsets = cluster.client.call_leader(TOPIC, 0, lambda stub, timeout: stub.ListOffsets(request, timeout=timeout))
    assert [(o.partition, o.offset) for o in offsets.offsets] == [(0, 1)]
    nodes = cluster_status(cluster.info.directory)
    assert all(node["serving"] for node in nodes), nodes


def test_list_offsets_with_millions_of_partition_ids_is_refused_naming_the_field(limited: Cluster) -> None:
    address = _leader_address(limited, TOPIC, 0)
    stub = limited.client.log_stub(address)
    request = pb.ListOffsetsRequest(topic=TOPIC, partitions=[0] * 2_000_000, spec=pb.LATEST)

    error = _refusal(lambda: stub.ListOffsets(request, timeout=120))

    assert error.field == "partitions" and "max_request_items" in error.message
    _still_serving(limited, address)


def test_metadata_with_a_million_topic_names_is_refused_naming_the_field(limited: Cluster) -> None:
    address = limited.info.nodes[1].client_address
    admin = limited.client.admin_stub(address)

    error = _refusal(lambda: admin.Metadata(pb.MetadataRequest(topics=[TOPIC] * 1_000_000), timeout=120))

    assert error.field == "topics" and "max_request_items" in error.message
    answer = admin.Metadata(pb.MetadataRequest(topics=[TOPIC, TOPIC]), timeout=30)
    assert [t.name for t in answer.topics] == [TOPIC], "a name asked twice is described once"
    _still_serving(limited, address)


def test_a_fetch_asking_for_nearly_2_gib_is_clamped_to_the_node_s_fetch_limit(limited: Cluster) -> None:
    limited.create_topic(BIG, partitions=1, replication_factor=3, max_message_bytes=str(4 * MiB))
    batches = FETCH_LIMIT // BIG_BATCH + 2  # more than one fetch's worth
    for i in range(batches):
        request = pb.ProduceRequest(
            topic=BIG, partition=0, batch=encode_batch([bytes([i]) * BIG_BATCH], timestamps_ms=1)
        )
        limited.client.call_leader(BIG, 0, lambda stub, timeout, r=request: stub.Produce(r, timeout=timeout))
    address = _leader_address(limited, BIG, 0)
    stub = limited.client.log_stub(address)

    answer = stub.Fetch(pb.FetchRequest(topic=BIG, partition=0, offset=0, max_bytes=2**31 - 1), timeout=60)

    assert 0 < len(answer.batches) <= FETCH_LIMIT
    assert answer.high_watermark == batches and 0 < answer.next_offset < batches
    rest = stub.Fetch(
        pb.FetchRequest(topic=BIG, partition=0, offset=answer.next_offset, max_bytes=2**31 - 1), timeout=60
    )
    assert rest.next_offset == batches, "the rest is read by the next fetch"
    _still_serving(limited, address)
