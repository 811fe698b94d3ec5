"""A ``ProduceRequest``'s wire bytes, built around an encoded batch in one copy.

Through the generated message a batch's bytes were copied three times on their way to gRPC: joined into the
batch, copied into the message, copied again by ``SerializeToString()``; each copy of a megabyte batch is a
fresh allocation whose pages fault in (about a microsecond per 1 KiB record here). The producer instead joins
the batch's pieces (:func:`storage.batch.encode_batch_parts`) with the request's few other fields straight into
the serialized message, and hands gRPC those bytes with no serializer.

The bytes are what ``pb.ProduceRequest(...).SerializeToString()`` gives for the same fields (proto3: fields in
number order, a field at its default value left out), which tests/client/test_produce_request.py checks.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PRODUCE_METHOD", "PRODUCE_STREAM_METHOD", "produce_request"]

# The generated stub's method paths (rpc/proto/multiraft_pb2_grpc.py), for calls made with raw request bytes.
PRODUCE_METHOD = "/multiraft.v1.Log/Produce"
PRODUCE_STREAM_METHOD = "/multiraft.v1.Log/ProduceStream"

# Field keys (field number << 3 | wire type) of multiraft.proto's ProduceRequest.
_TOPIC = b"\x0a"  # 1, length-delimited
_PARTITION = b"\x10"  # 2, varint
_BATCH = b"\x1a"  # 3, length-delimited
_SEQUENCE = b"\x20"  # 4, varint
_TIMEOUT_MS = b"\x28"  # 5, varint


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def produce_request(
    topic: str, partition: int, batch: Sequence[bytes | memoryview], sequence: int, timeout_ms: int
) -> tuple[bytes, int]:
    """The serialized ``ProduceRequest`` whose ``batch`` is the concatenation of ``batch``'s pieces, and where
    in it the batch starts."""
    if partition < 0 or timeout_ms < 0 or sequence < 0:
        raise ValueError(f"negative partition, timeout or sequence ({partition}, {timeout_ms}, {sequence})")
    head = bytearray()
    if topic:
        name = topic.encode()
        head += _TOPIC + _varint(len(name)) + name
    if partition:
        head += _PARTITION + _varint(partition)
    head += _BATCH + _varint(sum(map(len, batch)))
    tail = bytearray()
    if sequence:
        tail += _SEQUENCE + _varint(sequence)
    if timeout_ms:
        tail += _TIMEOUT_MS + _varint(timeout_ms)
    return b"".join([head, *batch, tail]), len(head)
