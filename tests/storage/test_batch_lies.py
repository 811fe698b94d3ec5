"""A batch that lies about itself, with a valid CRC: the server's check refuses it naming the field, and the
decoder bounds every allocation by the bytes it has (issue 13: a 62-byte batch claiming 2^31-1 records made
a consumer allocate 16 GiB)."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import HEADER_SIZE, BatchFormatError, Compression, decode_batches, encode_batch, read_header
from storage.batch import check_batch

_HEADER = struct.Struct("<qIBIHiqqqhiI")
_RECORD_COUNT, _FIRST_TS, _MAX_TS, _BODY_LENGTH = 5, 6, 7, 11


def _forge(batch: bytes, body: bytes | None = None, **fields: int) -> bytes:
    """``batch`` with header fields replaced (by index name) and its CRC recomputed, as a liar would."""
    header = list(read_header(batch))
    names = {"record_count": _RECORD_COUNT, "first_timestamp": _FIRST_TS, "max_timestamp": _MAX_TS}
    names["body_length"] = _BODY_LENGTH
    for name, value in fields.items():
        header[names[name]] = value
    stored = batch[HEADER_SIZE:] if body is None else body
    header[1] = HEADER_SIZE + len(stored)
    forged = bytearray(_HEADER.pack(*header)) + stored
    struct.pack_into("<I", forged, 13, crc32c.crc32c(bytes(forged[17:])))
    return bytes(forged)


def _the_issues_batch() -> bytes:
    return _forge(encode_batch([b"x"], timestamps_ms=1_700_000_000_000), record_count=2**31 - 1)


def _peak_bytes(action: Callable[[], object]) -> int:
    """Peak bytes allocated while ``action`` fails with BatchFormatError (numpy and pyarrow loaded before)."""
    decode_batches(encode_batch([b"warm"], timestamps_ms=1, compression=Compression.ZSTD))
    tracemalloc.start()
    try:
        with pytest.raises(BatchFormatError):
            action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_issues_62_byte_batch_claiming_two_billion_records_is_refused_naming_record_count() -> None:
    batch = _the_issues_batch()
    assert len(batch) == 62
    with pytest.raises(BatchFormatError, match="record_count") as refused:
        check_batch(batch)
    assert refused.value.field == "record_count"


def test_decoding_a_lying_count_allocates_nothing_from_the_claim() -> None:
    assert _peak_bytes(lambda: decode_batches(_the_issues_batch())) < 1 << 20


@pytest.mark.parametrize("codec", [Compression.ZSTD, Compression.LZ4])
def test_a_compressed_body_claiming_gigabytes_is_refused_without_allocating_them(codec: Compression) -> None:
    batch = encode_batch([b"value"] * 10, timestamps_ms=1, compression=codec)
    liar = _forge(batch, body_length=2**32 - 1)
    assert _peak_bytes(lambda: decode_batches(liar)) < 1 << 20
    with pytest.raises(BatchFormatError, match="body_length"):
        check_batch(liar)


def test_a_zstd_frame_that_lies_about_its_content_size_is_decompressed_only_as_far_as_it_really_goes() -> None:
    import zstandard

    body = encode_batch([b"value"] * 10, timestamps_ms=1)[HEADER_SIZE:]
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(body)
    liar = _forge(encode_batch([b"value"] * 10, timestamps_ms=1), body=frame, body_length=2**31)
    liar = bytes(bytearray(liar[:17]) + struct.pack("<H", int(Compression.ZSTD)) + liar[19:])
    liar = _forge(liar)  # the codec changed: recompute the CRC
    assert _peak_bytes(lambda: decode_batches(liar)) < 8 << 20


def test_header_timestamps_must_match_the_records() -> None:
    batch = encode_batch([b"a", b"b"], timestamps_ms=[1000, 3000])
    check_batch(batch)
    with pytest.raises(BatchFormatError, match="max_timestamp"):
        check_batch(_forge(batch, max_timestamp=5000))
    moved_first = struct.pack("<i", 7) + batch[HEADER_SIZE + 4 :]  # the first record's delta is not 0
    with pytest.raises(BatchFormatError, match="first_timestamp"):
        check_batch(_forge(batch, body=moved_first))
    with pytest.raises(BatchFormatError, match="first_timestamp"):
        check_batch(_forge(batch, first_timestamp=-5000, max_timestamp=-3000))
    single = encode_batch([b"a", b"b"], timestamps_ms=1000)
    with pytest.raises(BatchFormatError, match="max_timestamp"):
        check_batch(_forge(single, max_timestamp=9000))


def test_a_header_key_that_is_not_utf8_or_splits_a_character_is_refused() -> None:
    batch = encode_batch([b"a", b"b"], timestamps_ms=1, headers=[[("\u00e9", b"1")], [("x", None)]])
    check_batch(batch)
    at = batch.index("\u00e9".encode())
    broken = _forge(batch, body=batch[HEADER_SIZE:at] + b"\xff\xfe" + batch[at + 2 :])
    with pytest.raises(BatchFormatError, match="hkey"):
        check_batch(broken)


@st.composite
def _lies(draw: st.DrawFn) -> bytes:
    n = draw(st.integers(1, 20))
    batch = encode_batch(
        draw(st.lists(st.binary(max_size=10), min_size=n, max_size=n)),
        keys=draw(st.one_of(st.none(), st.lists(st.binary(max_size=5), min_size=n, max_size=n))),
        timestamps_ms=draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n)),
        compression=draw(st.sampled_from(Compression)),
    )
    field = draw(st.sampled_from(["record_count", "first_timestamp", "max_timestamp", "body_length", "body"]))
    if field == "body":
        body = bytearray(batch[HEADER_SIZE:])
        at = draw(st.integers(0, len(body) - 1))
        body[at] ^= draw(st.integers(1, 255))
        return _forge(batch, body=bytes(body))
    value = draw(st.integers(0, 2**31 - 1) if field == "record_count" else st.integers(0, 2**32 - 1))
    return _forge(batch, **{field: value})


@given(_lies())
@settings(max_examples=300, deadline=None)
def test_whatever_a_batch_claims_the_check_and_the_decoder_refuse_it_or_agree(batch: bytes) -> None:
    try:
        header = check_batch(batch)
    except BatchFormatError:
        with pytest.raises(BatchFormatError):
            # what the check refuses for its body, the decoder refuses too (timestamps aside, it need not)
            table = decode_batches(batch)
            if read_header(batch).max_timestamp != int(table.column("timestamp").cast("int64").to_numpy().max()):
                raise BatchFormatError("timestamps") from None
            if int(table.column("timestamp").cast("int64")[0].as_py()) != read_header(batch).first_timestamp:
                raise BatchFormatError("timestamps") from None
        return
    assert decode_batches(batch).num_rows == header.record_count


@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=20)), min_size=1, max_size=20),
    st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))))),
    st.one_of(st.integers(0, 2**40), st.lists(st.integers(0, 2**45), min_size=20, max_size=20)),
    st.sampled_from(Compression),
)
@settings(max_examples=200, deadline=None)
def test_every_batch_the_encoder_writes_passes_the_servers_check(
    values: list[bytes | None],
    headers: list[tuple[str, bytes | None]] | None,
    timestamps: int | list[int],
    codec: Compression,
) -> None:
    n = len(values)
    batch = encode_batch(
        values,
        keys=values[::-1],
        headers=None if headers is None else [headers] * n,
        timestamps_ms=timestamps if isinstance(timestamps, int) else timestamps[:n],
        compression=codec,
    )
    assert check_batch(batch).record_count == n
