"""The record batch's fixed header: parse, check, CRC, and the names shared by encoding and decoding
(the layout is drawn in :mod:`storage.batch`)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from functools import cache
from typing import TYPE_CHECKING, NamedTuple

import crc32c

from storage.errors import BatchFormatError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BATCH_VERSION",
    "CODEC_MASK",
    "CRC_START",
    "HAS_HEADERS",
    "HAS_KEYS",
    "HAS_TIMESTAMPS",
    "HEADER_STRUCT",
    "MAX_BODY",
    "WIDE_TIMESTAMPS",
    "field_error",
    "HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "headers_type",
    "iter_batches",
    "read_header",
    "record_schema",
    "set_base_offset",
    "validate_batch",
]

BATCH_VERSION = 1
HEADER_STRUCT = struct.Struct("<qIBIHiqqqhiI")
HEADER_SIZE = HEADER_STRUCT.size
CRC_START = 17
_BASE_OFFSET = struct.Struct("<q")

CODEC_MASK = 0x7
HAS_KEYS = 1 << 3
HAS_HEADERS = 1 << 4
HAS_TIMESTAMPS = 1 << 5
WIDE_TIMESTAMPS = 1 << 6
_KNOWN_ATTRIBUTES = CODEC_MASK | HAS_KEYS | HAS_HEADERS | HAS_TIMESTAMPS | WIDE_TIMESTAMPS
MAX_BODY = (1 << 32) - 1


def field_error(field: str, message: str) -> BatchFormatError:
    """A BatchFormatError whose ``field`` names the part of the batch at fault."""
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
        return Compression(self.attributes & CODEC_MASK)

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
    header = BatchHeader._make(HEADER_STRUCT.unpack_from(buf, pos))
    if header.version != BATCH_VERSION:
        raise field_error("version", f"unsupported batch version {header.version}")
    if header.length < HEADER_SIZE or header.length > len(buf) - pos:
        raise field_error("length", f"{header.length} does not fit the {len(buf) - pos} bytes available")
    if header.record_count < 1:
        raise field_error("record_count", f"must be >= 1, got {header.record_count}")
    if header.attributes & ~_KNOWN_ATTRIBUTES or (header.attributes & CODEC_MASK) > max(Compression):
        raise field_error("attributes", f"unknown batch attributes {header.attributes:#x}")
    if header.max_timestamp < header.first_timestamp:
        raise field_error("max_timestamp", "before first_timestamp")
    return header


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Check the header and the CRC of the batch at ``pos``; return its header."""
    header = read_header(buf, pos)
    view = memoryview(buf)[pos + CRC_START : pos + header.length]
    if crc32c.crc32c(view) != header.crc:
        raise field_error("crc", f"batch CRC mismatch at byte {pos}")
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
