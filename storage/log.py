"""The segmented log of one replica, and the store that holds every log of a node.

A :class:`LogStore` is one LMDB environment per data directory (``<data_dir>/log.lmdb``). Each
topic-partition replica is a :class:`SegmentedLog` named ``<topic>/<partition>`` inside it; its segments
are LMDB named databases. ``docs/architecture.md`` records the measurement behind this layout: one
environment per node makes a group commit one transaction and two fdatasyncs for every partition in the
round, where one environment per segment costs two fdatasyncs per partition.

Threads. One *owner* thread mutates the store: append, truncate, roll, drop, sync. Everything it appends
goes into one LMDB write transaction that :meth:`LogStore.sync` commits durably, so a node syncs once per
scheduling round for all its partitions (group commit). The owner's reads (``entries``, ``term``...) see its
own unsynced appends. Other threads (fetch handlers) use :meth:`SegmentedLog.read` and the other methods
marked *any thread*: they see only what has been synced, through an immutable view published at each sync
and matched to the LMDB snapshot they read by transaction id.

A write that fails part-way (the map or the disk is full) leaves the log answering as before it, but the
pending transaction may hold part of it: every owner call then raises :class:`TransactionFailedError` until
:meth:`LogStore.rollback` discards everything since the last sync. Synced data is never touched.

Crash safety comes from LMDB's copy-on-write commit: after a crash, reopening yields exactly the last
committed (synced) state; an entry is never half visible. Every entry carries a CRC over its index, header
and payload, checked on every read, so a flipped bit is reported as :class:`CorruptionError` naming the file
and index instead of being served.

The engine is split by concern: :mod:`storage._store` (the environment and its transactions),
:mod:`storage._log_core` (a log's state), :mod:`storage._log_writes` (the write path),
:mod:`storage._log_reads` (reads, offset and time lookups), :mod:`storage._log_retention` (retention and
snapshot reset) and :mod:`storage._log_transfer` (export and import of sealed segments). This module names
the public parts.
"""

from __future__ import annotations

from storage._entries import ENTRY_OVERHEAD_BYTES, Entry, EntryKind, EntryLike, HardState, ReadResult, SegmentInfo
from storage._segmented import SegmentedLog
from storage._store import LogStore, StoreCapacity, disk_free_bytes

__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "EntryKind",
    "Entry",
    "EntryLike",
    "HardState",
    "SegmentInfo",
    "ReadResult",
    "LogStore",
    "StoreCapacity",
    "disk_free_bytes",
    "SegmentedLog",
]
