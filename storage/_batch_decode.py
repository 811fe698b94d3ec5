"""Decoding record batches in bulk (numpy and Arrow, a handful of calls per batch and none per record), and
the server's consistency check of one produced batch. Every allocation is bounded by the bytes a batch
holds, never by what its header claims."""

from __future__ import annotations

from codecs import utf_8_decode
from typing import TYPE_CHECKING, Any

import lz4.block
import zstandard

from storage._batch_header import (
    CODEC_MASK,
    HAS_HEADERS,
    HAS_KEYS,
    HAS_TIMESTAMPS,
    HEADER_SIZE,
    WIDE_TIMESTAMPS,
    BatchHeader,
    Compression,
    field_error,
    headers_type,
    iter_batches,
    read_header,
    record_schema,
    validate_batch,
)
from storage.errors import BatchFormatError

# numpy and pyarrow load on first use: a node needs numpy to check a batch's body, never pyarrow.
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    Int64Array = npt.NDArray[np.int64]

__all__ = ["MAX_CHECKED_BODY_BYTES", "SHARED_CHUNK_BYTES", "check_batch", "decode_batches", "first_offset_at_or_after"]

# A body decompressed in one call allocates its claimed length: only while that is within this many times the
# stored bytes; beyond, it is decompressed in chunks, so memory follows the bytes that really come out.
_ONE_SHOT_RATIO = 64
_CHUNK = 1 << 20
_LZ4_MAX_RATIO = 255  # an LZ4 block cannot expand more (one byte per 255 of a match)
MAX_CHECKED_BODY_BYTES = 256 << 20
"""The largest uncompressed body :func:`check_batch` accepts by default (the server decompresses it)."""
SHARED_CHUNK_BYTES = 64 << 10
"""A decoded batch with at least this many bytes of keys and values is a table chunk of its own over the
fetched bytes; smaller ones are joined (a copy), so that many small batches do not make many tiny chunks."""

_ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor()


def _decompress(header: BatchHeader, stored: memoryview) -> memoryview:
    """The body, never allocating more than the stored bytes can really expand to."""
    codec = header.attributes & CODEC_MASK
    claimed = header.body_length
    try:
        if codec == Compression.NONE:
            if len(stored) != claimed:
                raise field_error("body_length", f"{claimed} bytes claimed, the batch holds {len(stored)}")
            return stored
        if codec == Compression.ZSTD:
            declared = zstandard.frame_content_size(stored)
            if declared not in (-1, claimed):
                raise field_error("body_length", f"{claimed} bytes claimed, the zstd frame says {declared}")
            if claimed <= _ONE_SHOT_RATIO * len(stored):
                body = _ZSTD_DECOMPRESSOR.decompress(stored, max_output_size=claimed)
            else:
                body = _zstd_in_chunks(stored, claimed)
        else:
            if claimed > _LZ4_MAX_RATIO * len(stored) + 16:
                raise field_error("body_length", f"{claimed} bytes cannot come out of a {len(stored)}-byte LZ4 block")
            body = lz4.block.decompress(stored, uncompressed_size=claimed)
    except (zstandard.ZstdError, lz4.block.LZ4BlockError) as exc:
        raise field_error("body", f"cannot decompress the batch body: {exc}") from exc
    if len(body) != claimed:
        raise field_error("body_length", f"{claimed} bytes claimed, the body decompresses to {len(body)}")
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
        raise field_error("length", f"{header.length} bytes claimed, the request holds {len(buf)}")
    if header.first_timestamp < 0:
        raise field_error("first_timestamp", f"{header.first_timestamp} is before the epoch")
    if header.body_length > max_body_bytes:
        raise field_error("body_length", f"{header.body_length} bytes uncompressed exceeds {max_body_bytes}")
    view = memoryview(buf)
    columns = _Columns(header, _decompress(header, view[HEADER_SIZE : header.length]))
    timestamps = columns.timestamps
    if int(timestamps[0]) != header.first_timestamp:
        raise field_error("first_timestamp", "the first record's timestamp differs from the header's")
    if int(timestamps.max()) != header.max_timestamp:
        raise field_error(
            "max_timestamp", f"{header.max_timestamp} is not the records' largest, {int(timestamps.max())}"
        )
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
        per_record = 4 + 4 * bool(attributes & HAS_KEYS) + 4 * bool(attributes & HAS_HEADERS)
        if attributes & HAS_TIMESTAMPS:
            per_record += 8 if attributes & WIDE_TIMESTAMPS else 4
        if n * per_record > len(body):
            raise field_error(
                "record_count", f"{n} records need at least {n * per_record} body bytes, it has {len(body)}"
            )
        pos = 0

        def take(dtype: str, count: int) -> npt.NDArray[np.int64]:
            nonlocal pos
            width = np.dtype(dtype).itemsize * count
            if pos + width > len(body):
                raise field_error("body", "shorter than its length columns")
            array = np.frombuffer(body, dtype=dtype, count=count, offset=pos)
            pos += width
            return array

        if attributes & HAS_TIMESTAMPS:
            deltas = take("<i8" if attributes & WIDE_TIMESTAMPS else "<i4", n)
            self.timestamps: Int64Array = deltas.astype(np.int64) + header.first_timestamp
        else:
            self.timestamps = np.full(n, header.first_timestamp, dtype=np.int64)
        self.value_lengths = take("<i4", n)
        self.key_lengths = take("<i4", n) if attributes & HAS_KEYS else None
        if attributes & HAS_HEADERS:
            self.hdr_counts: npt.NDArray[np.int64] | None = take("<i4", n)
            if (self.hdr_counts < 0).any():
                raise field_error("hdr_count", "negative header count")
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
                raise field_error(name, "a length below " + ("-1" if nullable else "0"))
            size = int(np.maximum(lengths, 0).sum())
            if pos + size > len(body):
                raise field_error(name, f"the lengths add up to {size} bytes, the body has {len(body) - pos} left")
            view = body[pos : pos + size]
            pos += size
            return view

        self.value_data = data(self.value_lengths, True, "value_len")
        self.key_data = data(self.key_lengths, True, "key_len")
        self.hkey_data = data(self.hkey_lengths, False, "hkey_len")
        self.hval_data = data(self.hval_lengths, True, "hval_len")
        if pos != len(body):
            raise field_error("body_length", f"the body has {len(body) - pos} bytes beyond its columns")
        if self.hkey_lengths is not None and len(self.hkey_data):
            _check_utf8(self.hkey_data, self.hkey_lengths)


def _check_utf8(data: memoryview, lengths: npt.NDArray[np.int64]) -> None:
    """Header keys are strings: the whole column must be UTF-8, and no key may start inside a character
    (then each key is UTF-8 on its own). Two C calls, none per key."""
    import numpy as np

    try:
        utf_8_decode(data, None, True)
    except UnicodeDecodeError as exc:
        raise field_error("hkey", f"a header key is not UTF-8: {exc.reason}") from None
    starts = np.cumsum(lengths[:-1], dtype=np.int64)
    starts = starts[starts < len(data)]
    if len(starts) and ((np.frombuffer(data, dtype=np.uint8)[starts] & 0xC0) == 0x80).any():
        raise field_error("hkey", "a header key starts inside a UTF-8 character")


def _binary_array(
    lengths: list[npt.NDArray[Any]], data: list[memoryview], total: int, arrow_type: pa.DataType
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
    (plus ``headers`` when asked). Loops over batches, never over records.

    A batch with at least :data:`SHARED_CHUNK_BYTES` of values becomes a chunk of its own whose data buffers
    are views of ``buf`` (no copy; the table keeps ``buf`` alive); smaller neighbours are joined into one chunk."""
    import pyarrow as pa

    view = memoryview(buf)
    schema = record_schema()
    if include_headers:
        schema = schema.append(pa.field("headers", headers_type()))
    runs: list[list[tuple[BatchHeader, _Columns]]] = []
    run: list[tuple[BatchHeader, _Columns]] = []
    run_bytes = 0
    for header, pos in iter_batches(view, verify=verify):
        cols = _Columns(header, _decompress(header, view[pos + HEADER_SIZE : pos + header.length]))
        size = len(cols.value_data) + len(cols.key_data)
        if run and (size >= SHARED_CHUNK_BYTES or run_bytes >= SHARED_CHUNK_BYTES):
            runs.append(run)
            run, run_bytes = [], 0
        run.append((header, cols))
        run_bytes += size
    if run:
        runs.append(run)
    if not runs:
        return schema.empty_table()
    chunks = [_run_arrays(r, include_headers) for r in runs]
    if len(chunks) == 1:
        return pa.Table.from_arrays(chunks[0], schema=schema)
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(c, schema=schema) for c in chunks], schema=schema)


def _run_arrays(run: list[tuple[BatchHeader, _Columns]], include_headers: bool) -> list[pa.Array]:
    """The columns of a run of consecutive batches (one chunk of the decoded table)."""
    import numpy as np
    import pyarrow as pa

    offsets = [np.arange(h.base_offset, h.base_offset + h.record_count, dtype=np.int64) for h, _ in run]
    total = sum(h.record_count for h, _ in run)
    any_keys = any(c.key_lengths is not None for _, c in run)
    key_lengths = [
        c.key_lengths if c.key_lengths is not None else np.full(h.record_count, -1, dtype=np.int32) for h, c in run
    ]
    arrays: list[pa.Array] = [
        _fixed_width(pa.int64(), offsets),
        _fixed_width(pa.timestamp("ms", tz="UTC"), [c.timestamps for _, c in run]),
        _binary_array(key_lengths if any_keys else [], [c.key_data for _, c in run], total, pa.binary()),
        _binary_array([c.value_lengths for _, c in run], [c.value_data for _, c in run], total, pa.binary()),
    ]
    if include_headers:
        with_headers = [c for _, c in run if c.hdr_counts is not None]
        counts = [
            c.hdr_counts if c.hdr_counts is not None else np.zeros(h.record_count, dtype=np.int32) for h, c in run
        ]
        arrays.append(
            _headers_array(
                counts if with_headers else [],
                [c.hkey_lengths for c in with_headers if c.hkey_lengths is not None],
                [c.hkey_data for c in with_headers],
                [c.hval_lengths for c in with_headers if c.hval_lengths is not None],
                [c.hval_data for c in with_headers],
                total,
                bool(with_headers),
            )
        )
    return arrays


def _headers_array(
    counts: list[npt.NDArray[Any]],
    key_lengths: list[npt.NDArray[np.int64]],
    key_data: list[memoryview],
    value_lengths: list[npt.NDArray[np.int64]],
    value_data: list[memoryview],
    total: int,
    any_headers: bool,
) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    list_offsets = np.zeros(total + 1, dtype=np.int32)
    if counts:
        np.cumsum(np.concatenate(counts) if len(counts) > 1 else counts[0], out=list_offsets[1:])
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
    if not header.attributes & HAS_TIMESTAMPS:
        return header.base_offset
    cols = _Columns(header, _decompress(header, view[HEADER_SIZE : header.length]))
    return header.base_offset + int(np.argmax(cols.timestamps >= timestamp_ms))
