"""On-disk layout of the log store: LMDB keys and values. Internal to :mod:`storage`.

One LMDB environment per data directory holds every log of the node, so one write transaction (one group
commit) covers every partition that changed in a scheduling round. Named databases:

``meta``
    ``version``                      -> u32 store format version
    ``ids``                          -> u32 next log id, u32 next slot
    ``L`` + name                     -> u32 log id              (name is ``<topic>/<partition>``)
    ``h`` + log id                   -> hard state: u64 term, u64 vote, u64 commit
    ``c`` + log id                   -> compaction point: u64 index, u64 term (entries <= index are gone)
    ``s`` + log id + u64 base index  -> segment record (``SEGMENT``)
    ``a`` + log id + attribute name  -> attribute bytes
``d<slot>``  one segment's entries:  u64 index (big-endian) -> ``ENTRY_HEADER`` + payload
``i<slot>``  one segment's indexes:  ``o`` + u64 base offset -> ``OFFSET_VALUE``
                                     ``t`` + u64 running max record timestamp -> ``TIME_VALUE``

Segments live in reusable "slots" (a pair of named databases) rather than databases named after the segment:
dropping a segment empties its slot instead of deleting the database, so a reader in another thread never
holds a closed LMDB handle, and the number of named databases stays bounded by ``max_segments``.

An entry's CRC (crc32c) covers its big-endian index, the header fields before the CRC, and the payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

STORE_FORMAT_VERSION = 1
ENV_DIRNAME = "log.lmdb"

ENTRY_HEADER = struct.Struct("<QBqI")  # term, kind, timestamp_ms, crc
ENTRY_HEADER_SIZE = ENTRY_HEADER.size
_CRC_AT = 17
INDEX_KEY = struct.Struct(">Q")
U32 = struct.Struct("<I")
IDS = struct.Struct("<II")
HARD_STATE = struct.Struct("<QQQ")
COMPACTION = struct.Struct("<QQ")
SEGMENT = struct.Struct("<IQQqqqqqQQ")
OFFSET_VALUE = struct.Struct("<QIq")  # entry index, record count, batch max timestamp
TIME_VALUE = struct.Struct("<Qq")  # entry index, batch base offset
TERM_ONLY = struct.Struct("<Q")


def log_key(prefix: bytes, log_id: int) -> bytes:
    return prefix + U32.pack(log_id)


def segment_key(log_id: int, base_index: int) -> bytes:
    return b"s" + U32.pack(log_id) + INDEX_KEY.pack(base_index)


def offset_key(offset: int) -> bytes:
    return b"o" + INDEX_KEY.pack(offset)


def time_key(timestamp_ms: int) -> bytes:
    return b"t" + INDEX_KEY.pack(timestamp_ms)


def entry_crc(key: bytes, value: bytes | bytearray | memoryview) -> int:
    view = memoryview(value)
    return crc32c.crc32c(view[ENTRY_HEADER_SIZE:], crc32c.crc32c(view[:_CRC_AT], crc32c.crc32c(key)))


def seal_value(key: bytes, value: bytearray) -> None:
    """Write the CRC into a value whose header fields and payload are final."""
    U32.pack_into(value, _CRC_AT, entry_crc(key, value))


def value_crc_ok(key: bytes, value: bytes | bytearray | memoryview) -> bool:
    if len(value) < ENTRY_HEADER_SIZE:
        return False
    stored: int = U32.unpack_from(value, _CRC_AT)[0]
    return stored == entry_crc(key, value)


class EntryHeader(NamedTuple):
    term: int
    kind: int
    timestamp_ms: int
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
    max_record_timestamp_ms: int  # running max of record timestamps over the log up to this segment's end
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
