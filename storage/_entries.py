"""What a log stores and answers with: entries, Raft's hard state, segments as callers see them, reads.

Shared by the modules of the log engine; :mod:`storage.log` re-exports the public names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, Protocol

from storage import _format as fmt

__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "EntryKind",
    "Entry",
    "EntryLike",
    "HardState",
    "SegmentInfo",
    "ReadResult",
    "KINDS",
    "KIND_AT",
]

ENTRY_OVERHEAD_BYTES = fmt.ENTRY_HEADER_SIZE
"""Bytes the log stores per entry besides its payload; they count toward ``segment_bytes``."""


class EntryKind(IntEnum):
    """What a Raft entry holds. Same numbering as :class:`multiraft.raft.EntryKind`."""

    DATA = 0  # a record batch
    CONFIG = 1  # a membership change
    NOOP = 2  # the empty entry a new leader appends
    CONTROL = 3  # a replicated command of the node (retention, markers)


class EntryLike(Protocol):
    """Anything with an entry's five fields; Raft's entries are passed as they are."""

    @property
    def index(self) -> int: ...
    @property
    def term(self) -> int: ...
    @property
    def kind(self) -> int: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def payload(self) -> bytes | bytearray | memoryview: ...


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored Raft entry. A data entry's payload is a record batch whose base offset the log assigned."""

    index: int
    term: int
    kind: EntryKind
    timestamp_ms: int
    payload: bytes


class HardState(NamedTuple):
    """Raft's persistent state: current term, vote in that term (0 = none), commit index."""

    term: int = 0
    vote: int = 0
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A segment as callers see it."""

    base_index: int
    last_index: int
    base_offset: int
    next_offset: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    size_bytes: int
    entry_count: int
    sealed: bool

    @classmethod
    def of(cls, record: fmt.SegmentRecord, sealed: bool) -> SegmentInfo:
        return cls(
            base_index=record.base_index,
            last_index=record.last_index,
            base_offset=record.base_offset,
            next_offset=record.next_offset,
            first_timestamp_ms=record.first_timestamp_ms,
            max_timestamp_ms=record.max_timestamp_ms,
            size_bytes=record.size_bytes,
            entry_count=record.entry_count,
            sealed=sealed,
        )


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Record batches read from a log, concatenated as stored."""

    data: bytes
    batch_count: int
    next_offset: int  # offset after the last record returned (the offset to read next)
    log_start_offset: int
    log_end_offset: int  # offset after the last synced record


KINDS = frozenset(int(kind) for kind in EntryKind)
KIND_AT = 8  # byte of the entry header that holds the kind
