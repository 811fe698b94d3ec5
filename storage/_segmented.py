"""The segmented log, put together from its concerns (state in :mod:`storage._log_core`)."""

from __future__ import annotations

from storage._log_reads import LogReads
from storage._log_retention import LogRetention
from storage._log_transfer import LogTransfer
from storage._log_writes import LogWrites

__all__ = ["SegmentedLog"]


class SegmentedLog(LogWrites, LogReads, LogRetention, LogTransfer):
    """One replica's partition log: Raft entries in segments, with offset and time indexes.

    Get one from :meth:`LogStore.log`. Methods without a note are for the owner thread; methods noted
    *any thread* read only synced data and may run concurrently with the owner.
    """
