"""The record batch format: what the producer encodes is exactly what the consumer decodes, and any
damage is reported as BatchFormatError."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import (
    HEADER_SIZE,
    BatchFormatError,
    Compression,
    decode_batches,
    encode_arrow_batch,
    encode_batch,
    first_offset_at_or_after,
    headers_type,
    iter_batches,
    read_header,
    validate_batch,
)
from storage.batch import set_base_offset

optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.one_of(
    st.none(), st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
)


@st.composite
def record_sets(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(1, 30))
    return {
        "values": draw(st.lists(optional_bytes, min_size=n, max_size=n)),
        "keys": draw(st.one_of(st.none(), st.lists(optional_bytes, min_size=n, max_size=n))),
        "timestamps": draw(
            st.one_of(
                st.integers(0, 2**40),
                st.lists(st.integers(0, 2**45), min_size=n, max_size=n),
            )
        ),
        "headers": draw(st.one_of(st.none(), st.lists(header_lists, min_size=n, max_size=n))),
        "compression": draw(st.sampled_from(Compression)),
        "base_offset": draw(st.integers(0, 2**50)),
    }


@given(record_sets())
@settings(max_examples=300, deadline=None)
def test_decoding_returns_exactly_what_was_encoded(records: dict) -> None:
    n = len(records["values"])
    encoded = encode_batch(
        records["values"],
        keys=records["keys"],
        timestamps_ms=records["timestamps"],
        headers=records["headers"],
        compression=records["compression"],
        base_offset=records["base_offset"],
    )
    header = validate_batch(encoded)
    assert header.record_count == n and header.length == len(encoded)
    table = decode_batches(encoded, include_headers=True)
    timestamps = records["timestamps"]
    expected_ts = [timestamps] * n if isinstance(timestamps, int) else timestamps
    assert table.column("offset").to_pylist() == list(range(records["base_offset"], records["base_offset"] + n))
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == expected_ts
    assert table.column("value").to_pylist() == records["values"]
    assert table.column("key").to_pylist() == (records["keys"] or [None] * n)
    expected_headers = [[{"key": k, "value": v} for k, v in (h or [])] for h in (records["headers"] or [None] * n)]
    assert table.column("headers").to_pylist() == expected_headers
    assert header.first_timestamp == expected_ts[0] and header.max_timestamp == max(expected_ts)


def test_arrow_columns_encode_to_the_same_bytes_as_python_lists() -> None:
    values = [b"a", None, b"ccc"]
    keys = [None, b"k", b"kk"]
    headers = [[("x", b"1")], None, []]
    from_lists = encode_batch(values, keys=keys, headers=headers, timestamps_ms=[5, 6, 7])
    from_arrow = encode_arrow_batch(
        pa.array(values, pa.binary()),
        keys=pa.array(keys, pa.large_binary()),
        headers=pa.array(headers, headers_type()),
        timestamps_ms=[5, 6, 7],
    )
    assert from_lists == from_arrow


def test_a_sliced_arrow_array_encodes_only_its_slice() -> None:
    values = pa.array([b"skip", b"a", b"bb", b"skip"], pa.binary()).slice(1, 2)
    assert decode_batches(encode_arrow_batch(values, timestamps_ms=1)).column("value").to_pylist() == [b"a", b"bb"]


def test_a_null_headers_row_that_still_points_at_entries_writes_none_of_them() -> None:
    # Arrow allows a null list row backed by a non-empty range of child entries; those entries are not data.
    entries = pa.array([{"key": "a", "value": b"1"}, {"key": "hidden", "value": b"x"}], type=headers_type().value_type)
    headers = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), entries, mask=pa.array([False, True]))
    batch = encode_arrow_batch(pa.array([b"v0", b"v1"]), timestamps_ms=1, headers=headers)
    decoded = decode_batches(batch, include_headers=True).column("headers").to_pylist()
    assert decoded == [[{"key": "a", "value": b"1"}], []]


def test_the_log_writes_the_base_offset_without_invalidating_the_crc() -> None:
    encoded = bytearray(encode_batch([b"x"] * 4, timestamps_ms=1))
    set_base_offset(encoded, 1_000_000)
    assert validate_batch(encoded).base_offset == 1_000_000
    assert decode_batches(bytes(encoded)).column("offset").to_pylist() == [1_000_000 + i for i in range(4)]


def test_every_flipped_byte_after_the_base_offset_is_detected() -> None:
    encoded = encode_batch([b"hello", b"world"], keys=[b"k", None], timestamps_ms=[1, 2], compression=Compression.ZSTD)
    for position in range(8, len(encoded)):
        damaged = bytearray(encoded)
        damaged[position] ^= 0x10
        with pytest.raises(BatchFormatError):
            validate_batch(bytes(damaged))


@pytest.mark.parametrize("cut", [0, 1, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 3])
def test_a_truncated_batch_is_rejected(cut: int) -> None:
    encoded = encode_batch([b"0123456789"] * 3, timestamps_ms=1)
    with pytest.raises(BatchFormatError):
        validate_batch(encoded[:cut])


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_garbage_only_ever_raises_batch_format_error(garbage: bytes) -> None:
    for verify in (True, False):
        try:
            decode_batches(garbage, verify=verify, include_headers=True)
        except BatchFormatError:
            pass


@given(st.binary(min_size=1, max_size=200), st.sampled_from(Compression))
@settings(max_examples=300, deadline=None)
def test_a_body_that_lies_about_its_lengths_is_rejected_even_with_a_valid_crc(body: bytes, codec: Compression) -> None:
    # Forge a batch with a correct CRC around an arbitrary body: the decoder must still refuse it cleanly.
    import crc32c

    encoded = bytearray(encode_batch([b"x"], timestamps_ms=1))
    header = list(read_header(encoded))
    header[1] = HEADER_SIZE + len(body)  # length
    header[4] = int(codec)  # attributes: codec only
    header[11] = len(body) + 7  # claimed body length
    forged = bytearray(struct.pack("<qIBIHiqqqhiI", *header)) + body
    struct.pack_into("<I", forged, 13, crc32c.crc32c(bytes(forged[17:])))
    validate_batch(forged)
    with pytest.raises(BatchFormatError):
        decode_batches(bytes(forged))


def test_many_batches_decode_in_one_call_in_order() -> None:
    batches = [
        encode_batch([b"%d" % i for i in range(n)], timestamps_ms=n, base_offset=sum(range(1, n))) for n in range(1, 6)
    ]
    joined = b"".join(batches)
    assert [h.record_count for h, _ in iter_batches(joined)] == [1, 2, 3, 4, 5]
    assert decode_batches(joined).column("offset").to_pylist() == list(range(15))


def test_first_offset_at_or_after_a_timestamp_looks_inside_the_batch() -> None:
    encoded = encode_batch([b"a", b"b", b"c", b"d"], timestamps_ms=[50, 10, 70, 60], base_offset=100)
    assert first_offset_at_or_after(encoded, 0) == 100
    assert first_offset_at_or_after(encoded, 55) == 102
    assert first_offset_at_or_after(encoded, 65) == 102
    assert first_offset_at_or_after(encoded, 71) is None


def test_timestamps_far_apart_use_wide_deltas() -> None:
    encoded = encode_batch([b"a", b"b"], timestamps_ms=[0, 2**40])
    assert decode_batches(encoded).column("timestamp").cast(pa.int64()).to_pylist() == [0, 2**40]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"values": []}, "at least one record"),
        ({"values": [b"a"], "timestamps_ms": [1, 2]}, "timestamps_ms has 2"),
        ({"values": [b"a"], "keys": [b"a", b"b"]}, "keys has 2"),
        ({"values": [b"a"], "timestamps_ms": -1}, ">= 0"),
        ({"values": [b"a"], "headers": [[(None, b"v")]]}, "header keys must not be null"),
    ],
)
def test_bad_encoder_input_raises_a_clear_error(kwargs: dict, message: str) -> None:
    kwargs.setdefault("timestamps_ms", 1)
    with pytest.raises((ValueError, TypeError, pa.ArrowException), match=message):
        encode_batch(**kwargs)


def test_values_must_be_bytes_or_text() -> None:
    with pytest.raises(TypeError, match="values must be bytes"):
        encode_batch([1, 2], timestamps_ms=1)  # type: ignore[list-item]
    assert decode_batches(encode_batch(["é"], timestamps_ms=1)).column("value").to_pylist() == ["é".encode()]
