"""The producer serializes its ProduceRequests itself, around the batch's pieces: the bytes must be exactly what
the generated message would serialize, and a batch's request is built once and re-sent as it is."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpc.client._accumulator import RecordAccumulator, record_size
from rpc.client._produce_request import PRODUCE_METHOD, PRODUCE_STREAM_METHOD, produce_request
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from storage import Compression, decode_batches, read_header
from storage.batch import encode_batch, encode_batch_parts

UNLIMITED = 1 << 30


@settings(max_examples=200, deadline=None)
@given(
    topic=st.text(max_size=300),
    partition=st.integers(0, 2**31 - 1),
    pieces=st.lists(st.binary(min_size=1, max_size=400), min_size=1, max_size=6),  # a batch is never empty
    sequence=st.integers(0, 2**64 - 1),
    timeout_ms=st.integers(0, 2**31 - 1),
)
def test_the_request_bytes_are_what_the_generated_message_serializes(
    topic: str, partition: int, pieces: list[bytes], sequence: int, timeout_ms: int
) -> None:
    parts = [memoryview(p) if i % 2 else p for i, p in enumerate(pieces)]
    request, batch_at = produce_request(topic, partition, parts, sequence, timeout_ms)
    batch = b"".join(pieces)
    expected = pb.ProduceRequest(
        topic=topic, partition=partition, batch=batch, sequence=sequence, timeout_ms=timeout_ms
    ).SerializeToString()
    assert request == expected
    assert request[batch_at : batch_at + len(batch)] == batch
    assert pb.ProduceRequest.FromString(request).batch == batch


def test_negative_fields_are_refused_rather_than_misencoded() -> None:
    with pytest.raises(ValueError):
        produce_request("t", -1, [b"x"], 1, 0)
    with pytest.raises(ValueError):
        produce_request("t", 0, [b"x"], 1, -5)


def test_the_method_paths_are_the_generated_stubs() -> None:
    paths: list[str] = []

    class Recorder:
        def __getattr__(self, _kind: str) -> Any:
            def method(path: str, **_kwargs: Any) -> None:
                paths.append(path)

            return method

    pb_grpc.LogStub(Recorder())
    assert PRODUCE_METHOD in paths
    assert PRODUCE_STREAM_METHOD in paths


def test_the_batch_pieces_join_to_the_encoded_batch() -> None:
    values = [b"a", None, b"ccc" * 100]
    for compression in Compression:
        kwargs: dict[str, Any] = {
            "timestamps_ms": [5, 6, 9],
            "keys": [b"k", None, b"kk"],
            "headers": [(("h", b"v"),), None, ()],
            "compression": compression,
            "producer_id": 7,
            "producer_epoch": 1,
            "base_sequence": 40,
        }
        assert b"".join(encode_batch_parts(values, **kwargs)) == encode_batch(values, **kwargs)


def test_a_batch_builds_its_request_once_and_every_attempt_sends_the_same_bytes() -> None:
    acc = RecordAccumulator(
        batch_bytes=1 << 20,
        buffer_bytes=1 << 24,
        linger_s=0.005,
        delivery_timeout_s=60.0,
        max_block_s=1.0,
        rng=random.Random(3),
    )
    for i in range(5):
        value = b"value-%d" % i
        acc.append("orders", 2, 4, UNLIMITED, value, None, None, 1_000 + i, record_size(value, None, None))
    (batch,), _ = acc.drain(0.0, lambda tp: 10, force=True)
    batch.set_producer(42, 3, 100)
    ids = itertools.count(9)
    request = batch.produce_request(Compression.NONE, ids, 30_000)
    assert batch.produce_request(Compression.NONE, ids, 30_000) is request  # a retry: same bytes, same id
    assert batch.request_id == 9
    message = pb.ProduceRequest.FromString(request)
    assert (message.topic, message.partition, message.sequence, message.timeout_ms) == ("orders", 2, 9, 30_000)
    assert message.batch == batch.encode(Compression.NONE)
    header = read_header(message.batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 100)
    assert decode_batches(message.batch).column("value").to_pylist() == [b"value-%d" % i for i in range(5)]

    batch.set_producer(43, 0, 0)  # a new producer id: new bytes, a new request id
    again = pb.ProduceRequest.FromString(batch.produce_request(Compression.NONE, ids, 30_000))
    assert again.sequence == 10
    assert read_header(again.batch).producer_id == 43
