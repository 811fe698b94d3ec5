"""On-disk layout of the log store: LMDB keys and values. Internal to :mod:`storage`.

One LMDB environment per data directory holds every log of the node, so one write transaction (one group
commit) covers every partition that changed in a scheduling round.

LMDB's main database holds the metadata, every key prefixed with a zero byte (named databases are
registered in the main database too, under their printable names)::

    \0version                           -> u32 store format version
    \0ids                               -> u32 next log id, u32 next slot
    \0L + name                          -> u32 log id              (name is ``<topic>/<partition>``)
    \0h + log id                        -> hard state: u64 term, u64 vote, u64 commit
    \0c + log id                        -> compaction point: u64 index, u64 term (entries <= index are gone)
    \0s + log id + u64 base index       -> segment record (``SEGMENT``)
    \0a + log id + attribute name       -> attribute bytes

Each segment lives in a named database ``d<slot>``: u64 index (big-endian) -> ``ENTRY_HEADER`` + payload.
Slots are reused: dropping a segment empties its database instead of deleting it, so a reader in another
thread never holds a closed LMDB handle, and the number of named databases stays bounded.

Entries describe themselves, so the log needs no index database (one fewer B-tree to copy on every commit):
the header carries the log's next offset after the entry and the segment's running maximum record
timestamp, both non-decreasing within a segment, and offset or time lookups are binary searches over keys.
An entry's CRC (crc32c) covers its big-endian index, the header fields before the CRC, and the payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

STORE_FORMAT_VERSION = 1
ENV_DIRNAME = "log.lmdb"

ENTRY_HEADER = struct.Struct("<QBqqqI")  # term, kind, timestamp_ms, next_offset, segment max record ts, crc
ENTRY_HEADER_SIZE = ENTRY_HEADER.size
_CRC_AT = 33
_NEXT_OFFSET = struct.Struct("<q")
_NEXT_OFFSET_AT = 17
_MAX_RECORD_TS_AT = 25
INDEX_KEY = struct.Struct(">Q")
U32 = struct.Struct("<I")
IDS = struct.Struct("<II")
HARD_STATE = struct.Struct("<QQQ")
COMPACTION = struct.Struct("<QQ")
SEGMENT = struct.Struct("<IQQqqqqqQQ")
TERM_ONLY = struct.Struct("<Q")

META = b"\x00"
VERSION_KEY = META + b"version"
IDS_KEY = META + b"ids"
LOG_NAMES = META + b"L"
SEGMENTS = META + b"s"


def log_name_key(name: str) -> bytes:
    return LOG_NAMES + name.encode()


def log_key(tag: bytes, log_id: int) -> bytes:
    return META + tag + U32.pack(log_id)


def segment_key(log_id: int, base_index: int) -> bytes:
    return SEGMENTS + U32.pack(log_id) + INDEX_KEY.pack(base_index)


def slot_name(slot: int) -> bytes:
    return b"d%d" % slot


def next_offset_of(value: bytes | memoryview) -> int:
    """The log's next offset after this entry (a data entry's batch ends just before it)."""
    offset: int = _NEXT_OFFSET.unpack_from(value, _NEXT_OFFSET_AT)[0]
    return offset


def max_record_ts_of(value: bytes | memoryview) -> int:
    """The largest record timestamp in this entry's segment up to and including it (-1 if none)."""
    timestamp: int = _NEXT_OFFSET.unpack_from(value, _MAX_RECORD_TS_AT)[0]
    return timestamp


def entry_crc(key: bytes, value: bytes | bytearray | memoryview) -> int:
    view = memoryview(value)
    return crc32c.crc32c(view[ENTRY_HEADER_SIZE:], crc32c.crc32c(view[:_CRC_AT], crc32c.crc32c(key)))


Buffer = bytes | bytearray | memoryview
_HEAD = struct.Struct("<QBqqq")  # the header fields before the CRC
_BASE_OFFSET = struct.Struct("<q")


def build_value(
    key: bytes,
    term: int,
    kind: int,
    timestamp_ms: int,
    payload: Buffer,
    *,
    base_offset: int | None,
    next_offset: int,
    max_record_ts: int,
) -> bytes:
    """The stored value of an entry, built with one copy of the payload: the CRC is computed over the parts,
    and a data entry's batch gets ``base_offset`` in its first 8 bytes (outside the batch's own CRC)."""
    head = _HEAD.pack(term, kind, timestamp_ms, next_offset, max_record_ts)
    crc = crc32c.crc32c(head, crc32c.crc32c(key))
    if base_offset is None:
        body: tuple[Buffer, ...] = (payload,)
    else:
        body = (_BASE_OFFSET.pack(base_offset), memoryview(payload)[8:])
    for part in body:
        crc = crc32c.crc32c(part, crc)
    return b"".join((head, U32.pack(crc), *body))


def value_crc_ok(key: bytes, value: bytes | bytearray | memoryview) -> bool:
    if len(value) < ENTRY_HEADER_SIZE:
        return False
    stored: int = U32.unpack_from(value, _CRC_AT)[0]
    return stored == entry_crc(key, value)


class EntryHeader(NamedTuple):
    term: int
    kind: int
    timestamp_ms: int
    next_offset: int
    max_record_ts: int
    crc: int


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """What the store persists about one segment. Immutable: each change makes a new record."""

    slot: int
    base_index: int
    last_index: int  # base_index - 1 while empty
    base_offset: int
    next_offset: int
    first_timestamp_ms: int  # first entry timestamp > 0 in the segment, -1 if none
    max_timestamp_ms: int  # largest entry timestamp, -1 if none
    max_record_timestamp_ms: int  # largest record timestamp in the segment, -1 if none
    size_bytes: int  # sum of stored value sizes
    entry_count: int

    def pack(self) -> bytes:
        return SEGMENT.pack(
            self.slot,
            self.base_index,
            self.last_index,
            self.base_offset,
            self.next_offset,
            self.first_timestamp_ms,
            self.max_timestamp_ms,
            self.max_record_timestamp_ms,
            self.size_bytes,
            self.entry_count,
        )

    @classmethod
    def unpack(cls, raw: bytes | memoryview) -> SegmentRecord:
        return cls(*SEGMENT.unpack(raw))
