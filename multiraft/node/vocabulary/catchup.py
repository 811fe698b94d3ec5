"""What a replica catching up by segment copy asks its source for."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SegmentChunkRequest"]


@dataclass(frozen=True, slots=True)
class SegmentChunkRequest:
    """A chunk of an exported segment file, for a replica catching up by segment copy."""

    group_id: int
    base_index: int
    last_index: int
    crc: int
    offset: int
    length: int
    copied: int = 0  # the copier's progress, reported to the leader (status, move progress)
    total: int = 0
