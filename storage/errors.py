"""Errors raised by :mod:`storage`.

Every error the package raises derives from :class:`StorageError`; errors from lmdb and the OS are mapped at
the boundary (``raise ... from exc``) so callers never see a foreign exception::

    StorageError
    ├── StorageConfigError        a config field is wrong (names the field); also a ValueError
    ├── StorageArgumentError      a bad argument (log name, range, size); also a ValueError
    ├── LogClosedError            the log or store was used after close()
    ├── InvalidEntryError         bad input to append(): index gap, term going back, unknown kind, bad batch
    │   └── EntryTooLargeError    an entry larger than StorageConfig.max_entry_bytes
    ├── BatchFormatError          a record batch is malformed: bad length, version, codec or CRC; also a ValueError
    ├── BeforeLogStartError       the requested index or offset is below the log start: removed by retention or
    │                             a snapshot
    ├── BeyondLogEndError         the requested index or offset is beyond the end of the log (or not synced yet)
    ├── SegmentNotFoundError      no sealed segment starts at the given index
    ├── SegmentFileError          an exported segment file is malformed, truncated or fails its checksum
    │   └── ChunkChecksumError    a copied chunk of a segment file fails its checksum (fetch it again)
    ├── CorruptionError           data read from disk fails a check; names the file and the entry index
    │   └── UnrepairableStoreError  the store is damaged beyond repair in place (its directory of logs is lost)
    ├── StorageFullError          the disk or the LMDB map is full
    └── TransactionFailedError    an earlier write failed part-way; rollback() must discard the pending writes
"""

from __future__ import annotations

__all__ = [
    "StorageError",
    "StorageConfigError",
    "StorageArgumentError",
    "LogClosedError",
    "InvalidEntryError",
    "EntryTooLargeError",
    "BatchFormatError",
    "BeforeLogStartError",
    "BeyondLogEndError",
    "SegmentNotFoundError",
    "SegmentFileError",
    "ChunkChecksumError",
    "CorruptionError",
    "UnrepairableStoreError",
    "StorageFullError",
    "TransactionFailedError",
]


class StorageError(Exception):
    """Base of every error raised by the storage package."""


class StorageConfigError(StorageError, ValueError):
    """A configuration field has a wrong value; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class StorageArgumentError(StorageError, ValueError):
    """A bad argument: a log name, an index range, a size."""


class LogClosedError(StorageError):
    """The log or its store was used after close()."""


class InvalidEntryError(StorageError):
    """append() was given entries that would break the log; nothing was written."""


class EntryTooLargeError(InvalidEntryError):
    """An entry is larger than ``StorageConfig.max_entry_bytes``."""


class BatchFormatError(StorageError, ValueError):
    """A record batch is malformed (length, version, codec, checksum or body layout)."""

    field = ""  # the batch field at fault, when one is named (set by storage.batch)


class BeforeLogStartError(StorageError):
    """The requested index or offset is below the log start: retention removed it or a snapshot replaced it."""


class BeyondLogEndError(StorageError):
    """The requested index or offset is beyond the last one in the log (readers see only what is synced)."""


class SegmentNotFoundError(StorageError):
    """No sealed segment starts at the requested index."""


class SegmentFileError(StorageError):
    """An exported segment file is malformed, truncated or fails its checksum."""


class ChunkChecksumError(SegmentFileError):
    """A chunk of a segment file being copied does not match its checksum; nothing of it was written."""


class CorruptionError(StorageError):
    """Data read from disk failed a consistency check. ``path`` and ``index`` say where."""

    def __init__(self, message: str, *, path: str, index: int | None = None) -> None:
        where = f"{path}" if index is None else f"{path} at index {index}"
        super().__init__(f"{message} ({where})")
        self.path = path
        self.index = index


class UnrepairableStoreError(CorruptionError):
    """The store cannot be repaired in place (e.g. LMDB's main database, the directory of logs, is damaged):
    set it aside (:func:`storage.set_aside_store`) and rebuild every replica from its peers."""


class StorageFullError(StorageError):
    """No space left: the disk is full or the LMDB map size was reached."""


class TransactionFailedError(StorageError):
    """A write failed part-way, so the pending (unsynced) transaction may hold part of it.

    Every owner call that would use that transaction raises this until :meth:`LogStore.rollback` discards it
    (:meth:`LogStore.sync` discards it too, and raises). What was synced is untouched.
    """
