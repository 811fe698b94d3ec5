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

``docs/benchmarks.md`` has the measurement that chose this layout over an Arrow IPC body. This module encodes;
the header lives in :mod:`storage._batch_header`, decoding and the server's check in :mod:`storage._batch_decode`
(all re-exported here).
"""

from __future__ import annotations

import itertools
import operator
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import crc32c
import lz4.block
import zstandard

from storage._batch_decode import MAX_CHECKED_BODY_BYTES, check_batch, decode_batches, first_offset_at_or_after
from storage._batch_header import (
    BATCH_VERSION,
    CRC_START,
    HAS_HEADERS,
    HAS_KEYS,
    HAS_TIMESTAMPS,
    HEADER_SIZE,
    HEADER_STRUCT,
    MAX_BODY,
    WIDE_TIMESTAMPS,
    BatchHeader,
    Compression,
    headers_type,
    iter_batches,
    read_header,
    record_schema,
    set_base_offset,
    validate_batch,
)

# numpy and pyarrow load on first encode: a node never encodes.
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
    "encode_batch_parts",
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

_ZSTD_COMPRESSOR = zstandard.ZstdCompressor(level=3)


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
    return b"".join(
        encode_batch_parts(
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
    )


def encode_batch_parts(
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
) -> list[bytes | memoryview]:
    """:func:`encode_batch`'s bytes as the pieces that make them up, in order (the header, with its CRC, first):
    a caller that frames the batch (the producer's ProduceRequest) joins them once with its own framing instead
    of copying a joined batch again."""
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
            attributes |= HAS_TIMESTAMPS
            ts_column = deltas.astype("<i4").tobytes()
        else:
            attributes |= HAS_TIMESTAMPS | WIDE_TIMESTAMPS
            ts_column = deltas.astype("<i8").tobytes()
    if first_ts < 0:
        raise ValueError("timestamps must be >= 0 (milliseconds since the epoch)")

    columns: list[bytes | memoryview] = [ts_column, value_lengths.astype("<i4", copy=False).tobytes()]
    data: list[bytes | memoryview] = [value_data]
    if keys is not None:
        key_lengths, key_data = _column(keys, "keys")
        if len(key_lengths) != n:
            raise ValueError(f"keys has {len(key_lengths)} entries for {n} records")
        attributes |= HAS_KEYS
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
        attributes |= HAS_HEADERS
        columns += [counts.astype("<i4").tobytes(), hkey_lengths.tobytes(), hval_lengths.tobytes()]
        data += [hkey_data, hval_data]

    pieces = columns + data
    body_size = sum(map(len, pieces))
    if body_size > MAX_BODY:
        raise ValueError(f"batch body of {body_size} bytes exceeds {MAX_BODY}")
    # Uncompressed, the body's pieces go straight into the batch: one copy of the data, not three.
    stored = pieces if compression is Compression.NONE else [_compress(compression, b"".join(pieces))]
    header_tail = HEADER_STRUCT.pack(
        base_offset,
        HEADER_SIZE + sum(map(len, stored)),
        BATCH_VERSION,
        0,
        attributes,
        n,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        body_size,
    )
    crc = crc32c.crc32c(memoryview(header_tail)[CRC_START:])
    for piece in stored:
        crc = crc32c.crc32c(piece, crc)
    header = bytearray(header_tail)
    struct.pack_into("<I", header, 13, crc)
    return [bytes(header), *stored]


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
