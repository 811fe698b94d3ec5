"""What leaves a segmented log: sealed segments dropped by retention (by age or size, always a prefix, the
same on every replica), and the whole log replaced when a Raft snapshot is installed."""

from __future__ import annotations

from storage._entries import SegmentInfo
from storage._lmdb import log
from storage._log_core import LogCore
from storage.errors import StorageArgumentError

__all__ = ["LogRetention"]


class LogRetention(LogCore):
    """Drop a prefix of sealed segments, find the prefix retention allows, reset to a snapshot."""

    # ----------------------------------------------------------------------------------------- retention

    def drop_before(self, index: int) -> list[SegmentInfo]:
        """Remove every sealed segment whose entries are all below ``index``; return what was dropped.

        The active segment is never dropped. The compaction point moves to the last dropped entry, so
        ``term(first_index() - 1)`` stays answerable.
        """
        self._check_open()
        droppable = 0
        while droppable < len(self._segments) - 1 and self._segments[droppable].last_index < index:
            droppable += 1
        if not droppable:
            return []
        dropped = self._segments[:droppable]
        last = dropped[-1]
        compaction_term = self.term(last.last_index) if last.entry_count else self._compaction_term
        with self._writing() as txn:
            for record in dropped:
                self._remove_segment_record(txn, record)
            self._segments = self._segments[droppable:]
            self._set_compaction(txn, self._segments[0].base_index - 1, compaction_term)
        log.info("segments dropped", log=self.name, segments=len(dropped), before_index=index)
        return [SegmentInfo.of(r, True) for r in dropped]

    def segments_older_than(self, retention_ms: int, now_ms: int) -> list[SegmentInfo]:
        """The oldest sealed segments whose newest entry timestamp is at least ``retention_ms`` before
        ``now_ms``, as a prefix of the log (retention never leaves a hole). A segment with no timestamped
        entry has no age and qualifies."""
        self._check_open()
        cutoff = now_ms - retention_ms
        prefix: list[SegmentInfo] = []
        for record in self._segments[:-1]:
            if record.max_timestamp_ms > cutoff:
                break
            prefix.append(SegmentInfo.of(record, True))
        return prefix

    def segments_over_size(self, retention_bytes: int) -> list[SegmentInfo]:
        """The oldest sealed segments to drop so that the log's size is at most ``retention_bytes``."""
        self._check_open()
        excess = self.size_bytes() - retention_bytes
        prefix: list[SegmentInfo] = []
        for record in self._segments[:-1]:
            if excess <= 0:
                break
            prefix.append(SegmentInfo.of(record, True))
            excess -= record.size_bytes
        return prefix

    def reset(self, index: int, term: int, next_offset: int) -> None:
        """Replace the whole log by "everything up to ``index`` (of ``term``) is elsewhere": what installing a
        Raft snapshot does. The next entry appended is ``index + 1`` and gets offset ``next_offset``."""
        self._check_open()
        if index < 0 or term < 0 or next_offset < 0:
            raise StorageArgumentError("index, term and next_offset must be >= 0")
        with self._writing() as txn:
            for record in self._segments:
                self._remove_segment_record(txn, record)
            self._segments = []
            self._init_empty(index + 1, next_offset, term)
            self._set_compaction(txn, index, term)
            self._last_term = term
