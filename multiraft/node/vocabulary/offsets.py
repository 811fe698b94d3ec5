"""Consumer groups' committed offsets and the operations on the offsets Raft group that holds them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CommittedOffset", "OffsetRow", "OffsetsCommit", "OffsetsFetch", "OffsetsList", "OffsetsRequest"]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int  # the next offset the group will read
    metadata: str = ""
    commit_time_ms: int = 0  # the offsets leader's clock when it accepted the commit


@dataclass(frozen=True, slots=True)
class OffsetRow:
    topic: str
    partition: int
    offset: int
    metadata: str = ""
    commit_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class OffsetsCommit:
    """A commit; a group member commits as itself (checked by the coordinator's fencing), anyone else
    outside any generation (``generation`` -1, no member id)."""

    group: str
    rows: tuple[OffsetRow, ...]
    member_id: str = ""
    generation: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetsFetch:
    group: str
    partitions: tuple[tuple[str, int], ...] | None  # None: every partition the group committed


@dataclass(frozen=True, slots=True)
class OffsetsList:
    pass


@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    """An operation on the offsets Raft group ``group_id`` (a partition of ``__consumer_offsets``)."""

    group_id: int
    operation: OffsetsCommit | OffsetsFetch | OffsetsList
