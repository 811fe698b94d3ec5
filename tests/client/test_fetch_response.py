"""The consumer reads a pushed FetchResponse off the wire itself, so that its batches are a view of the bytes
gRPC received rather than protobuf's copies: it must read every response exactly as the generated code does,
skip the fields it does not know, and refuse malformed bytes with ValueError (gRPC then fails the stream).
And the path from a response to ``poll()`` and ``poll_arrow()`` output must not import pandas."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.errors import UnavailableError
from rpc.client._fetch_response import parse_fetch_response
from rpc.client._fetcher import StreamFetcher
from rpc.proto import multiraft_pb2 as pb
from storage import encode_batch

ROOT = Path(__file__).resolve().parents[2]
int64s = st.integers(-(2**63), 2**63 - 1)

responses = st.builds(
    pb.FetchResponse,
    topic=st.text(max_size=20),
    partition=st.integers(-(2**31), 2**31 - 1),
    batches=st.binary(max_size=300),
    high_watermark=int64s,
    log_start_offset=int64s,
    next_offset=int64s,
)
errors = st.builds(
    pb.Error,
    code=st.integers(0, 16),
    reason=st.text(max_size=10),
    message=st.text(max_size=30),
    metadata=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)


@given(responses, st.one_of(st.none(), errors))
@settings(max_examples=300, deadline=None)
def test_every_response_reads_as_the_generated_code_reads_it(message: pb.FetchResponse, error: pb.Error | None) -> None:
    if error is not None:
        message.error.CopyFrom(error)
    parsed = parse_fetch_response(message.SerializeToString())
    assert (parsed.topic, parsed.partition, bytes(parsed.batches)) == (
        message.topic,
        message.partition,
        message.batches,
    )
    assert (parsed.high_watermark, parsed.log_start_offset, parsed.next_offset) == (
        message.high_watermark,
        message.log_start_offset,
        message.next_offset,
    )
    assert parsed.error == (message.error if message.HasField("error") else None)


def test_the_batches_are_a_view_of_the_received_bytes_not_a_copy() -> None:
    wire = pb.FetchResponse(batches=b"x" * 10_000, next_offset=7).SerializeToString()
    parsed = parse_fetch_response(wire)
    assert isinstance(parsed.batches, memoryview) and parsed.batches.obj is wire


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    return bytes([number << 3 | wire_type]) + payload


def test_fields_it_does_not_know_are_skipped_whatever_their_wire_type() -> None:
    known = pb.FetchResponse(batches=b"abc", high_watermark=9, next_offset=5).SerializeToString()
    unknown = (
        _field(14, 0, b"\x96\x01")  # varint
        + _field(15, 1, b"12345678")  # fixed64
        + _field(13, 2, b"\x03xyz")  # length-delimited
        + _field(12, 5, b"1234")  # fixed32
    )
    parsed = parse_fetch_response(unknown + known + unknown)
    generated = pb.FetchResponse.FromString(unknown + known + unknown)
    assert (bytes(parsed.batches), parsed.high_watermark, parsed.next_offset) == (
        generated.batches,
        generated.high_watermark,
        generated.next_offset,
    )


@pytest.mark.parametrize(
    "wire",
    [
        _field(3, 2, b"\x05abc"),  # batches runs past the end
        _field(6, 0, b"\x80"),  # truncated varint
        _field(6, 0, b"\xff" * 11),  # varint of 11 bytes
        _field(3, 0, b"\x01"),  # batches as a varint
        _field(6, 2, b"\x00"),  # next_offset length-delimited
        _field(9, 3, b""),  # a group (wire type 3)
        _field(9, 1, b"1234"),  # fixed64 cut short
    ],
)
def test_malformed_bytes_are_refused(wire: bytes) -> None:
    with pytest.raises(ValueError, match="FetchResponse"):
        parse_fetch_response(wire)


def test_decoding_and_handing_out_records_imports_no_pandas() -> None:
    """pyarrow imports pandas for some conversions (``pa.scalar``, ``pa.array`` of a list), about a second of
    CPU in a consumer's first poll. (Encoding headers does; so the batch is encoded here.)"""
    batches = encode_batch(
        [b"a", b"b", None], keys=[b"k", None, b"k"], headers=[[("h", b"v")], None, []], timestamps_ms=5
    )
    script = f"""
import sys
from rpc.client._consumer_tables import as_records, as_table
from multiraft.errors import UnavailableError
from rpc.client._fetch_response import parse_fetch_response
from rpc.client._fetcher import StreamFetcher
from rpc.client._partition_buffer import PartitionBuffer, take_fairly
from rpc.client._records import TopicPartition
from rpc.proto import multiraft_pb2 as pb

batches = bytes.fromhex("{batches.hex()}")
wire = pb.FetchResponse(batches=batches, high_watermark=3, next_offset=3).SerializeToString()
state = PartitionBuffer(TopicPartition("t", 0))
state.take_in(parse_fetch_response(wire))
first, rest = take_fairly([state], 0, 2), take_fairly([state], 0, 2)
assert as_table(first).num_rows == 2 and len(as_records(rest)) == 1
print("pandas" in sys.modules)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False"]


def test_a_stream_whose_response_cannot_be_read_ends_with_a_retriable_error() -> None:
    """A server that pushes bytes no FetchResponse has: the stream ends with UnavailableError (the consumer
    re-opens it after a back-off), never with a silent stop or an exception on the consumer's thread."""

    def subscribe(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield pb.FetchResponse(batches=b"", high_watermark=1, next_offset=0).SerializeToString()
        yield b"\x1a\x05abc"  # batches claims 5 bytes, 3 follow

    handler = grpc.method_handlers_generic_handler(
        pb.DESCRIPTOR.services_by_name["Log"].full_name, {"Subscribe": grpc.unary_stream_rpc_method_handler(subscribe)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    woken = threading.Event()
    fetcher = StreamFetcher(woken.set)
    try:
        stream = fetcher.open(f"127.0.0.1:{port}", pb.SubscribeRequest(topic="t", partition=0, offset=0))
        deadline = time.monotonic() + 20
        while not stream.done and time.monotonic() < deadline:
            woken.wait(0.5)
            woken.clear()
        assert stream.done
        first = stream.pop()
        assert first is not None and first.high_watermark == 1
        assert stream.pop() is None
        assert isinstance(stream.error, UnavailableError) and stream.error.retriable
    finally:
        fetcher.close()
        server.stop(None)
