"""The record batch: the unit a producer sends, a data entry stores and a consumer decodes.

One definition shared by the client (encode, bulk decode) and the server (header checks only; the server
never decodes the records body).

Header, little-endian, 57 bytes::

    offset size field
     0      8   base_offset      i64  offset of the first record; written by the log at append (outside the CRC)
     8      4   length           u32  bytes in the whole batch, header included
    12      1   version          u8   format version, 1
    13      4   crc              u32  crc32c of bytes [17, length)
    17      2   attributes       u16  bits 0-2 codec (0 none, 1 zstd, 2 lz4); bit 3 keys present; bit 4
                                      headers present; bit 5 per-record timestamps present; bit 6 they are i64
    19      4   record_count     i32  >= 1
    23      8   first_timestamp  i64  ms since the epoch
    31      8   max_timestamp    i64  ms since the epoch
    39      8   producer_id      i64  -1 when not idempotent
    47      2   producer_epoch   i16
    49      4   base_sequence    i32  sequence number of the first record, -1 when not idempotent
    53      4   body_length      u32  bytes of the body before compression
    57      ..  body             (compressed with the codec)

Body, columnar, so that decoding is a handful of numpy/Arrow calls per batch and none per record::

    [ts_delta   i32|i64 x n]   if per-record timestamps (else every record has first_timestamp)
    value_len   i32 x n        -1 for a null value
    [key_len    i32 x n]       if keys present; -1 for a null key
    [hdr_count  i32 x n]       if headers present, then m = sum(hdr_count):
    [hkey_len   i32 x m]
    [hval_len   i32 x m]       -1 for a null header value
    value bytes, [key bytes], [header key bytes (utf-8)], [header value bytes]

``docs/benchmarks.md`` has the measurement that chose this layout over an Arrow IPC body.
"""

from __future__ import annotations

import itertools
import operator
import struct
from codecs import utf_8_decode
from collections.abc import Iterator, Sequence
from enum import IntEnum
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

import crc32c
import lz4.block
import zstandard

from storage.errors import BatchFormatError

# numpy and pyarrow load on first use: a node needs numpy to check a batch's body, never pyarrow.
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    Int32Array = npt.NDArray[np.int32]
    Int64Array = npt.NDArray[np.int64]


__all__ = [
    "BATCH_VERSION",
    "HEADER_SIZE",
    "headers_type",
    "BatchHeader",
    "Compression",
    "encode_batch",
    "encode_arrow_batch",
    "read_header",
    "validate_batch",
    "check_batch",
    "MAX_CHECKED_BODY_BYTES",
    "iter_batches",
    "decode_batches",
    "first_offset_at_or_after",
    "set_base_offset",
    "record_schema",
]

BATCH_VERSION = 1
_HEADER = struct.Struct("<qIBIHiqqqhiI")
HEADER_SIZE = _HEADER.size
_CRC_START = 17
_BASE_OFFSET = struct.Struct("<q")

_CODEC_MASK = 0x7
_HAS_KEYS = 1 << 3
_HAS_HEADERS = 1 << 4
_HAS_TIMESTAMPS = 1 << 5
_WIDE_TIMESTAMPS = 1 << 6
_KNOWN_ATTRIBUTES = _CODEC_MASK | _HAS_KEYS | _HAS_HEADERS | _HAS_TIMESTAMPS | _WIDE_TIMESTAMPS
_MAX_BODY = (1 << 32) - 1
# A body decompressed in one call allocates its claimed length: only while that is within this many times the
# stored bytes; beyond, it is decompressed in chunks, so memory follows the bytes that really come out.
_ONE_SHOT_RATIO = 64
_CHUNK = 1 << 20
_LZ4_MAX_RATIO = 255  # an LZ4 block cannot expand more (one byte per 255 of a match)
MAX_CHECKED_BODY_BYTES = 256 << 20
"""The largest uncompressed body :func:`check_batch` accepts by default (the server decompresses it)."""


def _bad(field: str, message: str) -> BatchFormatError:
    error = BatchFormatError(f"{field}: {message}")
    error.field = field
    return error


@cache
def headers_type() -> pa.DataType:
    """Arrow type of the ``headers`` column: list<struct<key: string, value: binary>>."""
    import pyarrow as pa

    return pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))


@cache
def record_schema() -> pa.Schema:
    """Arrow schema of decoded records (``headers`` is appended when asked for)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
        ]
    )


_ZSTD_COMPRESSOR = zstandard.ZstdCompressor(level=3)
_ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor()


class Compression(IntEnum):
    """Codec of a batch body."""

    NONE = 0
    ZSTD = 1
    LZ4 = 2


class BatchHeader(NamedTuple):
    """The fixed header of one record batch."""

    base_offset: int
    length: int
    version: int
    crc: int
    attributes: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    body_length: int

    @property
    def codec(self) -> Compression:
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the header at ``pos`` (no CRC check; see :func:`validate_batch`)."""
    if len(buf) - pos < HEADER_SIZE:
        raise BatchFormatError(f"truncated batch header: {len(buf) - pos} bytes, need {HEADER_SIZE}")
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.version != BATCH_VERSION:
        raise _bad("version", f"unsupported batch version {header.version}")
    if header.length < HEADER_SIZE or header.length > len(buf) - pos:
        raise _bad("length", f"{header.length} does not fit the {len(buf) - pos} bytes available")
    if header.record_count < 1:
        raise _bad("record_count", f"must be >= 1, got {header.record_count}")
    if header.attributes & ~_KNOWN_ATTRIBUTES or (header.attributes & _CODEC_MASK) > max(Compression):
        raise _bad("attributes", f"unknown batch attributes {header.attributes:#x}")
    if header.max_timestamp < header.first_timestamp:
        raise _bad("max_timestamp", "before first_timestamp")
    return header


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Check the header and the CRC of the batch at ``pos``; return its header."""
    header = read_header(buf, pos)
    view = memoryview(buf)[pos + _CRC_START : pos + header.length]
    if crc32c.crc32c(view) != header.crc:
        raise _bad("crc", f"batch CRC mismatch at byte {pos}")
    return header


def iter_batches(buf: bytes | bytearray | memoryview, *, verify: bool = True) -> Iterator[tuple[BatchHeader, int]]:
    """Yield (header, start position) for each batch in a concatenation of batches."""
    pos, end = 0, len(buf)
    check = validate_batch if verify else read_header
    while pos < end:
        header = check(buf, pos)
        yield header, pos
        pos += header.length


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Write the base offset in place: it sits before the CRC'd region, so the CRC stays valid."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


# --------------------------------------------------------------------------------------------------- encoding


def _binary_parts(array: pa.Array) -> tuple[Int32Array, memoryview]:
    """Lengths (-1 for null) and the contiguous data of a binary/string Arrow array, without copying data."""
    import numpy as np
    import pyarrow as pa

    offsets_dtype: type[np.signedinteger[Any]]
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        offsets_dtype = np.int64
    elif pa.types.is_binary(array.type) or pa.types.is_string(array.type):
        offsets_dtype = np.int32
    else:
        raise TypeError(f"expected a binary or string array, got {array.type}")
    n = len(array)
    buffers = array.buffers()
    offsets: npt.NDArray[Any] = np.frombuffer(buffers[1], dtype=offsets_dtype, count=array.offset + n + 1)[
        array.offset :
    ]
    lengths = np.diff(offsets).astype(np.int32, copy=False)
    if array.null_count:
        lengths = np.where(array.is_null().to_numpy(zero_copy_only=False), np.int32(-1), lengths).astype(np.int32)
    data = memoryview(buffers[2] if buffers[2] is not None else b"")[int(offsets[0]) : int(offsets[-1])]
    return lengths, data


def _as_binary_array(values: Sequence[bytes | str | None], name: str) -> pa.Array:
    import pyarrow as pa

    try:
        return pa.array(values, type=pa.binary())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
        raise TypeError(f"{name} must be bytes, str (encoded as UTF-8) or None: {exc}") from exc


_Column = tuple["Int32Array", "bytes | memoryview"]


def _column(values: Sequence[bytes | str | None] | pa.Array | pa.ChunkedArray, name: str) -> _Column:
    """Lengths (-1 for null) and concatenated bytes of one column.

    Lists and tuples of bytes are iterated in C (``b"".join``, ``map(len, ...)``) without pyarrow, whose list
    conversion imports pandas; everything else goes through Arrow.
    """
    import numpy as np

    if isinstance(values, list | tuple):
        n = len(values)
        try:
            nulls = values.count(None)
            if not nulls:
                return np.fromiter(map(len, values), dtype=np.int32, count=n), b"".join(values)
            present = list(map(operator.is_not, values, itertools.repeat(None)))
            kept = list(itertools.compress(values, present))
            data = b"".join(kept)
            lengths = np.full(n, -1, dtype=np.int32)
            lengths[np.fromiter(present, dtype=bool, count=n)] = np.fromiter(
                map(len, kept), dtype=np.int32, count=n - nulls
            )
            return lengths, data
        except TypeError:
            pass  # str, or something Arrow may know how to convert
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        values = _as_binary_array(values, name)
    return _binary_parts(values)


def encode_batch(
    values: Sequence[bytes | str | None] | pa.Array | pa.ChunkedArray,
    *,
    timestamps_ms: int | Sequence[int] | Int64Array,
    keys: Sequence[bytes | str | None] | pa.Array | pa.ChunkedArray | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | pa.Array | pa.ChunkedArray | None = None,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
) -> bytes:
    """Encode records into one batch. Values and keys are bytes (or str, as UTF-8) or None; per-record work
    happens in C. Arrow arrays are taken as they are (see :func:`encode_arrow_batch`)."""
    import numpy as np

    value_lengths, value_data = _column(values, "values")
    n = len(value_lengths)
    if n < 1:
        raise ValueError("a batch needs at least one record")
    attributes = int(compression)
    if isinstance(timestamps_ms, int):
        first_ts = max_ts = timestamps_ms
        ts_column: bytes = b""
    else:
        ts = np.asarray(timestamps_ms, dtype=np.int64)
        if ts.shape != (n,):
            raise ValueError(f"timestamps_ms has {ts.size} entries for {n} records")
        first_ts, max_ts = int(ts[0]), int(ts.max())
        deltas = ts - first_ts
        if not deltas.any():
            ts_column = b""
        elif int(deltas.min()) >= -(2**31) and int(deltas.max()) < 2**31:
            attributes |= _HAS_TIMESTAMPS
            ts_column = deltas.astype("<i4").tobytes()
        else:
            attributes |= _HAS_TIMESTAMPS | _WIDE_TIMESTAMPS
            ts_column = deltas.astype("<i8").tobytes()
    if first_ts < 0:
        raise ValueError("timestamps must be >= 0 (milliseconds since the epoch)")

    columns: list[bytes | memoryview] = [ts_column, value_lengths.astype("<i4", copy=False).tobytes()]
    data: list[bytes | memoryview] = [value_data]
    if keys is not None:
        key_lengths, key_data = _column(keys, "keys")
        if len(key_lengths) != n:
            raise ValueError(f"keys has {len(key_lengths)} entries for {n} records")
        attributes |= _HAS_KEYS
        columns.append(key_lengths.astype("<i4", copy=False).tobytes())
        data.append(key_data)
    if headers is not None:
        header_array = _headers_column(headers)
        if len(header_array) != n:
            raise ValueError(f"headers has {len(header_array)} entries for {n} records")
        list_offsets = np.frombuffer(header_array.buffers()[1], dtype=np.int32, count=header_array.offset + n + 1)[
            header_array.offset :
        ]
        counts = np.diff(list_offsets).astype(np.int32)
        if header_array.null_count:
            counts[header_array.is_null().to_numpy(zero_copy_only=False)] = 0
        # flatten(), not values: a null row may still point at entries, which must not be written.
        entries = header_array.flatten()
        hkey_lengths, hkey_data = _binary_parts(entries.field("key"))
        hval_lengths, hval_data = _binary_parts(entries.field("value"))
        if (hkey_lengths < 0).any():
            raise ValueError("header keys must not be null")
        attributes |= _HAS_HEADERS
        columns += [counts.astype("<i4").tobytes(), hkey_lengths.tobytes(), hval_lengths.tobytes()]
        data += [hkey_data, hval_data]

    body = b"".join(columns + data)
    if len(body) > _MAX_BODY:
        raise ValueError(f"batch body of {len(body)} bytes exceeds {_MAX_BODY}")
    stored = _compress(compression, body)
    header_tail = _HEADER.pack(
        base_offset,
        HEADER_SIZE + len(stored),
        BATCH_VERSION,
        0,
        attributes,
        n,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(body),
    )
    crc = crc32c.crc32c(stored, crc32c.crc32c(memoryview(header_tail)[_CRC_START:]))
    out = bytearray(header_tail)
    struct.pack_into("<I", out, 13, crc)
    out += stored
    return bytes(out)


def _headers_column(
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | pa.Array | pa.ChunkedArray,
) -> pa.Array:
    import pyarrow as pa

    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    if not isinstance(headers, pa.Array):
        return pa.array(headers, type=headers_type())
    return headers if headers.type.equals(headers_type()) else headers.cast(headers_type())


def encode_arrow_batch(
    values: pa.Array | pa.ChunkedArray,
    *,
    timestamps_ms: int | Sequence[int] | Int64Array,
    keys: pa.Array | pa.ChunkedArray | None = None,
    headers: pa.Array | pa.ChunkedArray | None = None,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
) -> bytes:
    """Encode Arrow columns (binary or string values and keys, ``headers_type()`` headers) into one batch,
    straight from their buffers: what the Spark sink does with each Arrow batch."""
    return encode_batch(
        values,
        timestamps_ms=timestamps_ms,
        keys=keys,
        headers=headers,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        base_offset=base_offset,
    )


def _compress(codec: Compression, body: bytes) -> bytes:
    if codec is Compression.NONE:
        return body
    if codec is Compression.ZSTD:
        return _ZSTD_COMPRESSOR.compress(body)
    if codec is Compression.LZ4:
        compressed: bytes = lz4.block.compress(body, store_size=False)
        return compressed
    raise ValueError(f"unknown compression {codec!r}")


def _decompress(header: BatchHeader, stored: memoryview) -> memoryview:
    """The body, never allocating more than the stored bytes can really expand to."""
    codec = header.attributes & _CODEC_MASK
    claimed = header.body_length
    try:
        if codec == Compression.NONE:
            if len(stored) != claimed:
                raise _bad("body_length", f"{claimed} bytes claimed, the batch holds {len(stored)}")
            return stored
        if codec == Compression.ZSTD:
            declared = zstandard.frame_content_size(stored)
            if declared not in (-1, claimed):
                raise _bad("body_length", f"{claimed} bytes claimed, the zstd frame says {declared}")
            if claimed <= _ONE_SHOT_RATIO * len(stored):
                body = _ZSTD_DECOMPRESSOR.decompress(stored, max_output_size=claimed)
            else:
                body = _zstd_in_chunks(stored, claimed)
        else:
            if claimed > _LZ4_MAX_RATIO * len(stored) + 16:
                raise _bad("body_length", f"{claimed} bytes cannot come out of a {len(stored)}-byte LZ4 block")
            body = lz4.block.decompress(stored, uncompressed_size=claimed)
    except (zstandard.ZstdError, lz4.block.LZ4BlockError) as exc:
        raise _bad("body", f"cannot decompress the batch body: {exc}") from exc
    if len(body) != claimed:
        raise _bad("body_length", f"{claimed} bytes claimed, the body decompresses to {len(body)}")
    return memoryview(body)


def _zstd_in_chunks(stored: memoryview, claimed: int) -> bytes:
    """At most ``claimed + 1`` bytes of the frame's output, read a chunk at a time."""
    chunks: list[bytes] = []
    total = 0
    with _ZSTD_DECOMPRESSOR.stream_reader(stored) as reader:
        for _ in range(claimed // _CHUNK + 2):  # each round reads a chunk or ends
            chunk = reader.read(min(_CHUNK, claimed + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > claimed:
                break
    return b"".join(chunks)


def check_batch(buf: bytes | bytearray | memoryview, *, max_body_bytes: int = MAX_CHECKED_BODY_BYTES) -> BatchHeader:
    """Check that one batch (all of ``buf``) is consistent with itself, as the server does before it writes
    one: header and CRC, the compression frame and every length column against the body it has, the
    header's timestamps against the records'. Vectorised over columns; a failure names the field."""
    header = validate_batch(buf)
    if header.length != len(buf):
        raise _bad("length", f"{header.length} bytes claimed, the request holds {len(buf)}")
    if header.first_timestamp < 0:
        raise _bad("first_timestamp", f"{header.first_timestamp} is before the epoch")
    if header.body_length > max_body_bytes:
        raise _bad("body_length", f"{header.body_length} bytes uncompressed exceeds {max_body_bytes}")
    view = memoryview(buf)
    columns = _Columns(header, _decompress(header, view[HEADER_SIZE : header.length]))
    timestamps = columns.timestamps
    if int(timestamps[0]) != header.first_timestamp:
        raise _bad("first_timestamp", "the first record's timestamp differs from the header's")
    if int(timestamps.max()) != header.max_timestamp:
        raise _bad("max_timestamp", f"{header.max_timestamp} is not the records' largest, {int(timestamps.max())}")
    return header


# --------------------------------------------------------------------------------------------------- decoding


class _Columns:
    """One batch's body split into numpy length arrays and data views."""

    __slots__ = (
        "hdr_counts",
        "hkey_data",
        "hkey_lengths",
        "hval_data",
        "hval_lengths",
        "key_data",
        "key_lengths",
        "timestamps",
        "value_data",
        "value_lengths",
    )

    def __init__(self, header: BatchHeader, body: memoryview) -> None:
        import numpy as np

        n = header.record_count
        attributes = header.attributes
        # The count is a claim: every record takes at least its length entries, so the body bounds it
        # before anything is allocated from it.
        per_record = 4 + 4 * bool(attributes & _HAS_KEYS) + 4 * bool(attributes & _HAS_HEADERS)
        if attributes & _HAS_TIMESTAMPS:
            per_record += 8 if attributes & _WIDE_TIMESTAMPS else 4
        if n * per_record > len(body):
            raise _bad("record_count", f"{n} records need at least {n * per_record} body bytes, it has {len(body)}")
        pos = 0

        def take(dtype: str, count: int) -> npt.NDArray[np.int64]:
            nonlocal pos
            width = np.dtype(dtype).itemsize * count
            if pos + width > len(body):
                raise _bad("body", "shorter than its length columns")
            array = np.frombuffer(body, dtype=dtype, count=count, offset=pos)
            pos += width
            return array

        if attributes & _HAS_TIMESTAMPS:
            deltas = take("<i8" if attributes & _WIDE_TIMESTAMPS else "<i4", n)
            self.timestamps: Int64Array = deltas.astype(np.int64) + header.first_timestamp
        else:
            self.timestamps = np.full(n, header.first_timestamp, dtype=np.int64)
        self.value_lengths = take("<i4", n)
        self.key_lengths = take("<i4", n) if attributes & _HAS_KEYS else None
        if attributes & _HAS_HEADERS:
            self.hdr_counts: npt.NDArray[np.int64] | None = take("<i4", n)
            if (self.hdr_counts < 0).any():
                raise _bad("hdr_count", "negative header count")
            m = int(self.hdr_counts.sum())
            self.hkey_lengths: npt.NDArray[np.int64] | None = take("<i4", m)
            self.hval_lengths: npt.NDArray[np.int64] | None = take("<i4", m)
        else:
            self.hdr_counts = self.hkey_lengths = self.hval_lengths = None

        def data(lengths: npt.NDArray[np.int64] | None, nullable: bool, name: str) -> memoryview:
            nonlocal pos
            if lengths is None:
                return memoryview(b"")
            if (lengths < (-1 if nullable else 0)).any():
                raise _bad(name, "a length below " + ("-1" if nullable else "0"))
            size = int(np.maximum(lengths, 0).sum())
            if pos + size > len(body):
                raise _bad(name, f"the lengths add up to {size} bytes, the body has {len(body) - pos} left")
            view = body[pos : pos + size]
            pos += size
            return view

        self.value_data = data(self.value_lengths, True, "value_len")
        self.key_data = data(self.key_lengths, True, "key_len")
        self.hkey_data = data(self.hkey_lengths, False, "hkey_len")
        self.hval_data = data(self.hval_lengths, True, "hval_len")
        if pos != len(body):
            raise _bad("body_length", f"the body has {len(body) - pos} bytes beyond its columns")
        if self.hkey_lengths is not None and len(self.hkey_data):
            _check_utf8(self.hkey_data, self.hkey_lengths)


def _check_utf8(data: memoryview, lengths: npt.NDArray[np.int64]) -> None:
    """Header keys are strings: the whole column must be UTF-8, and no key may start inside a character
    (then each key is UTF-8 on its own). Two C calls, none per key."""
    import numpy as np

    try:
        utf_8_decode(data, None, True)
    except UnicodeDecodeError as exc:
        raise _bad("hkey", f"a header key is not UTF-8: {exc.reason}") from None
    starts = np.cumsum(lengths[:-1], dtype=np.int64)
    starts = starts[starts < len(data)]
    if len(starts) and ((np.frombuffer(data, dtype=np.uint8)[starts] & 0xC0) == 0x80).any():
        raise _bad("hkey", "a header key starts inside a UTF-8 character")


def _binary_array(
    lengths: list[npt.NDArray[np.int64]], data: list[memoryview], total: int, arrow_type: pa.DataType
) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    if not lengths:
        if not total:
            empty_offsets = pa.py_buffer(np.zeros(1, dtype=np.int32))
            return pa.Array.from_buffers(arrow_type, 0, [None, empty_offsets, pa.py_buffer(b"")])
        return pa.nulls(total, type=arrow_type)
    all_lengths = np.concatenate(lengths) if len(lengths) > 1 else lengths[0]
    nulls = all_lengths < 0
    offsets = np.zeros(len(all_lengths) + 1, dtype=np.int64)
    np.cumsum(np.maximum(all_lengths, 0), out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise BatchFormatError("a decoded column exceeds 2 GiB; fetch less at a time")
    validity = None
    null_count = int(nulls.sum())
    if null_count:
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    joined = pa.py_buffer(b"".join(data)) if len(data) != 1 else pa.py_buffer(data[0])
    return pa.Array.from_buffers(
        arrow_type, len(all_lengths), [validity, pa.py_buffer(offsets.astype(np.int32)), joined], null_count
    )


def decode_batches(
    buf: bytes | bytearray | memoryview, *, include_headers: bool = False, verify: bool = True
) -> pa.Table:
    """Decode a concatenation of batches into one Arrow table with :data:`record_schema()` columns
    (plus ``headers`` when asked). Loops over batches, never over records."""
    import numpy as np
    import pyarrow as pa

    view = memoryview(buf)
    offsets: list[Int64Array] = []
    timestamps: list[Int64Array] = []
    value_lengths: list[npt.NDArray[np.int64]] = []
    value_data: list[memoryview] = []
    key_lengths: list[npt.NDArray[np.int64]] = []
    key_data: list[memoryview] = []
    hdr_counts: list[npt.NDArray[np.int64]] = []
    hkey_lengths: list[npt.NDArray[np.int64]] = []
    hkey_data: list[memoryview] = []
    hval_lengths: list[npt.NDArray[np.int64]] = []
    hval_data: list[memoryview] = []
    any_keys = any_headers = False
    total = 0
    for header, pos in iter_batches(view, verify=verify):
        n = header.record_count
        cols = _Columns(header, _decompress(header, view[pos + HEADER_SIZE : pos + header.length]))
        offsets.append(np.arange(header.base_offset, header.base_offset + n, dtype=np.int64))
        timestamps.append(cols.timestamps)
        value_lengths.append(cols.value_lengths)
        value_data.append(cols.value_data)
        if cols.key_lengths is not None:
            any_keys = True
            key_lengths.append(cols.key_lengths)
            key_data.append(cols.key_data)
        else:
            key_lengths.append(np.full(n, -1, dtype=np.int32))
        if include_headers:
            if cols.hdr_counts is not None:
                assert cols.hkey_lengths is not None and cols.hval_lengths is not None
                any_headers = True
                hdr_counts.append(cols.hdr_counts)
                hkey_lengths.append(cols.hkey_lengths)
                hval_lengths.append(cols.hval_lengths)
                hkey_data.append(cols.hkey_data)
                hval_data.append(cols.hval_data)
            else:
                hdr_counts.append(np.zeros(n, dtype=np.int32))
        total += n

    arrays: list[pa.Array] = [
        _fixed_width(pa.int64(), offsets),
        _fixed_width(pa.timestamp("ms", tz="UTC"), timestamps),
        _binary_array(key_lengths if any_keys else [], key_data, total, pa.binary()),
        _binary_array(value_lengths, value_data, total, pa.binary()),
    ]
    schema = record_schema()
    if include_headers:
        arrays.append(_headers_array(hdr_counts, hkey_lengths, hkey_data, hval_lengths, hval_data, total, any_headers))
        schema = schema.append(pa.field("headers", headers_type()))
    return pa.Table.from_arrays(arrays, schema=schema)


def _headers_array(
    counts: list[npt.NDArray[np.int64]],
    key_lengths: list[npt.NDArray[np.int64]],
    key_data: list[memoryview],
    value_lengths: list[npt.NDArray[np.int64]],
    value_data: list[memoryview],
    total: int,
    any_headers: bool,
) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    all_counts = np.concatenate(counts) if counts else np.zeros(total, np.int32)
    list_offsets = np.zeros(total + 1, dtype=np.int32)
    np.cumsum(all_counts, out=list_offsets[1:])
    m = int(list_offsets[-1])
    if any_headers and m:
        keys = _binary_array(key_lengths, key_data, m, pa.string())
        values = _binary_array(value_lengths, value_data, m, pa.binary())
    else:
        keys = _binary_array([], [], 0, pa.string())
        values = _binary_array([], [], 0, pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], fields=list(headers_type().value_type))
    return pa.ListArray.from_arrays(_fixed_width(pa.int32(), [list_offsets]), entries, type=headers_type())


def _fixed_width(arrow_type: pa.DataType, parts: list[npt.NDArray[Any]]) -> pa.Array:
    """An Arrow array over numpy data, built from buffers (``pa.array`` on numpy would import pandas)."""
    import numpy as np
    import pyarrow as pa

    joined = np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else np.zeros(0, np.int64))
    return pa.Array.from_buffers(arrow_type, len(joined), [None, pa.py_buffer(joined)])


def first_offset_at_or_after(batch: bytes | bytearray | memoryview, timestamp_ms: int) -> int | None:
    """Offset of the first record in one batch whose timestamp is >= ``timestamp_ms`` (None if there is none).

    Used by the time index, which finds the batch; only the timestamp column is decoded.
    """
    import numpy as np

    view = memoryview(batch)
    header = read_header(view)
    if header.max_timestamp < timestamp_ms:
        return None
    if not header.attributes & _HAS_TIMESTAMPS:
        return header.base_offset
    cols = _Columns(header, _decompress(header, view[HEADER_SIZE : header.length]))
    return header.base_offset + int(np.argmax(cols.timestamps >= timestamp_ms))
