"""Several batches decoded in one call: a large batch's keys and values are a chunk of the table over the
bytes it was decoded from (nothing copied), small neighbours share a chunk, and the rows are the same as
decoding each batch alone. Damage anywhere is still refused."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import BatchFormatError, Compression, decode_batches, encode_batch
from storage._batch_decode import SHARED_CHUNK_BYTES

BIG_VALUE = b"v" * 1024
PER_BIG_BATCH = SHARED_CHUNK_BYTES // len(BIG_VALUE) + 1


def _batches(
    sizes: list[int], *, value: bytes = BIG_VALUE, keys: bool = False, headers: bool = False, start: int = 0
) -> bytes:
    """Batches of ``sizes`` records each, at consecutive offsets from ``start``."""
    out, offset = [], start
    for n in sizes:
        out.append(
            encode_batch(
                [value] * n,
                keys=[b"k%d" % i for i in range(n)] if keys else None,
                headers=[[("h", b"%d" % i)] for i in range(n)] if headers else None,
                timestamps_ms=[1_700_000_000_000 + offset + i for i in range(n)],
                base_offset=offset,
            )
        )
        offset += n
    return b"".join(out)


def _within(buffer: pa.Buffer, source: bytes) -> bool:
    start = pa.py_buffer(source).address
    return start <= buffer.address and buffer.address + buffer.size <= start + len(source)


def test_each_large_batch_is_a_chunk_whose_values_are_a_view_of_the_fetched_bytes() -> None:
    data = _batches([PER_BIG_BATCH, PER_BIG_BATCH, PER_BIG_BATCH])
    table = decode_batches(data, include_headers=True)
    values = table.column("value")
    assert values.num_chunks == 3
    assert all(_within(chunk.buffers()[2], data) for chunk in values.chunks)
    assert table.column("offset").to_pylist() == list(range(3 * PER_BIG_BATCH))
    assert values.to_pylist() == [BIG_VALUE] * (3 * PER_BIG_BATCH)


def test_small_batches_share_one_chunk() -> None:
    data = _batches([3, 1, 4, 1, 5], value=b"small")
    table = decode_batches(data, include_headers=True)
    assert table.column("value").num_chunks == 1
    assert table.column("offset").to_pylist() == list(range(14))


def test_a_large_batch_between_small_ones_stands_alone() -> None:
    data = _batches([2, PER_BIG_BATCH, 2], value=BIG_VALUE)
    table = decode_batches(data)
    assert [len(chunk) for chunk in table.column("value").chunks] == [2, PER_BIG_BATCH, 2]


@given(
    sizes=st.lists(st.sampled_from([1, 7, PER_BIG_BATCH]), min_size=1, max_size=5),
    keyed=st.lists(st.booleans(), min_size=5, max_size=5),
    headed=st.lists(st.booleans(), min_size=5, max_size=5),
)
@settings(max_examples=40, deadline=None)
def test_decoding_many_batches_gives_the_rows_of_each_decoded_alone(
    sizes: list[int], keyed: list[bool], headed: list[bool]
) -> None:
    parts, offset = [], 0
    for i, n in enumerate(sizes):
        parts.append(_batches([n], keys=keyed[i], headers=headed[i], start=offset))
        offset += n
    together = decode_batches(b"".join(parts), include_headers=True)
    alone = pa.concat_tables([decode_batches(p, include_headers=True) for p in parts])
    together.validate(full=True)
    assert together.to_pylist() == alone.to_pylist()


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_flipped_byte_in_any_batch_of_a_run_is_refused(where: int) -> None:
    data = bytearray(_batches([PER_BIG_BATCH, 2, PER_BIG_BATCH]))
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += struct.unpack_from("<I", data, pos + 8)[0]
    data[starts[where] + 100] ^= 0x01
    with pytest.raises(BatchFormatError):
        decode_batches(bytes(data))


def test_compressed_batches_decode_as_their_own_chunks_too() -> None:
    data = encode_batch([BIG_VALUE] * PER_BIG_BATCH, timestamps_ms=1, compression=Compression.ZSTD)
    table = decode_batches(data + encode_batch([b"x"], timestamps_ms=1, base_offset=PER_BIG_BATCH))
    assert table.column("value").to_pylist() == [BIG_VALUE] * PER_BIG_BATCH + [b"x"]


def test_nothing_to_decode_is_an_empty_table() -> None:
    table = decode_batches(b"", include_headers=True)
    assert table.num_rows == 0 and table.column_names[-1] == "headers"
