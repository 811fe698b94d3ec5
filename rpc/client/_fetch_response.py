"""A pushed ``FetchResponse`` read off the wire without copying its batches.

The generated message (upb) copies the ``batches`` bytes once when it parses them and again on every read of
the field: two or three copies of every fetched byte, each a fresh allocation whose pages the kernel must
fault in. :func:`parse_fetch_response` reads the few scalar fields itself and hands out ``batches`` as a
view of the bytes gRPC received, so decoding (which keeps views of them too) starts from the one copy gRPC
made. It reads the protobuf wire format of ``multiraft.v1.FetchResponse``: fields it does not know are
skipped by their wire type, as protobuf does, so a newer server's additions are harmless; the ``error``
item, small and rare, is parsed by the generated code.
"""

from __future__ import annotations

from typing import Protocol

from rpc.proto import multiraft_pb2 as pb

__all__ = ["FetchedResponse", "FetchResponseLike", "parse_fetch_response"]

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_TOPIC, _PARTITION, _BATCHES, _HIGH_WATERMARK, _LOG_START, _NEXT_OFFSET, _ERROR = range(1, 8)
_MAX_VARINT_BYTES = 10


class FetchResponseLike(Protocol):
    """What the consumer reads of one pushed response (the generated message has it too)."""

    @property
    def batches(self) -> bytes | memoryview: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...


class FetchedResponse:
    """One pushed response: its record batches (a view of the received bytes) and its offsets, or the
    ``error`` that ends the stream (None when there is none)."""

    __slots__ = ("batches", "error", "high_watermark", "log_start_offset", "next_offset", "partition", "topic")

    def __init__(self) -> None:
        self.topic = ""
        self.partition = 0
        self.batches: memoryview = memoryview(b"")
        self.high_watermark = 0
        self.log_start_offset = 0
        self.next_offset = 0
        self.error: pb.Error | None = None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    result = shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        if pos >= len(data):
            raise ValueError("FetchResponse: truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ValueError("FetchResponse: a varint longer than 10 bytes")


def _signed64(value: int) -> int:
    """An int64 (or int32, sign-extended on the wire) from its unsigned varint."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def parse_fetch_response(data: bytes) -> FetchedResponse:
    """The response in ``data`` (a serialized ``FetchResponse``); ValueError if it is malformed."""
    response = FetchedResponse()
    view = memoryview(data)
    pos, end = 0, len(data)
    for _ in range(end):  # each round reads one field, at least one byte
        if pos >= end:
            break
        key, pos = _varint(data, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, pos = _varint(data, pos)
            if field == _PARTITION:
                response.partition = _signed64(value)
            elif field == _HIGH_WATERMARK:
                response.high_watermark = _signed64(value)
            elif field == _LOG_START:
                response.log_start_offset = _signed64(value)
            elif field == _NEXT_OFFSET:
                response.next_offset = _signed64(value)
        elif wire_type == _LENGTH:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise ValueError(f"FetchResponse: field {field} runs {pos + length - end} bytes past the end")
            if field == _BATCHES:
                response.batches = view[pos : pos + length]
            elif field == _TOPIC:
                response.topic = str(view[pos : pos + length], "utf-8")
            elif field == _ERROR:
                if response.error is None:
                    response.error = pb.Error()
                response.error.MergeFromString(bytes(view[pos : pos + length]))  # (repeated: merged, as protobuf does)
            pos += length
        elif wire_type in (_FIXED64, _FIXED32):
            pos += 8 if wire_type == _FIXED64 else 4
        else:
            raise ValueError(f"FetchResponse: field {field} has wire type {wire_type}, which it cannot have")
        if pos > end:
            raise ValueError("FetchResponse: truncated")
        if field in (_PARTITION, _HIGH_WATERMARK, _LOG_START, _NEXT_OFFSET) and wire_type != _VARINT:
            raise ValueError(f"FetchResponse: field {field} is not a varint")
        if field in (_TOPIC, _BATCHES, _ERROR) and wire_type != _LENGTH:
            raise ValueError(f"FetchResponse: field {field} is not length-delimited")
    return response
