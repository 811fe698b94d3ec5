"""One replica's partition log: a segmented log in LMDB.

The Raft log *is* the partition log: a :class:`SegmentedLog` stores Raft entries, and a data entry's payload
is a record batch (:mod:`storage.batch`) that the log gives offsets to and indexes by offset and time. All
logs of a node live in one :class:`LogStore` so that one fsync commits every partition (group commit).

Names load on first use (PEP 562): the client imports :mod:`storage.batch`, which imports this package
first, and must not pay for lmdb and the log engine it never uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage.batch import (
        HEADER_SIZE,
        BatchHeader,
        Compression,
        decode_batches,
        encode_arrow_batch,
        encode_batch,
        first_offset_at_or_after,
        headers_type,
        iter_batches,
        read_header,
        record_schema,
        validate_batch,
    )
    from storage.check import (
        CheckReport,
        Dropped,
        LogCheck,
        Problem,
        RepairReport,
        check_store,
        repair_store,
        set_aside_store,
    )
    from storage.config import StorageConfig
    from storage.errors import (
        BatchFormatError,
        BeforeLogStartError,
        BeyondLogEndError,
        ChunkChecksumError,
        CorruptionError,
        EntryTooLargeError,
        InvalidEntryError,
        LogClosedError,
        SegmentFileError,
        SegmentNotFoundError,
        StorageArgumentError,
        StorageConfigError,
        StorageError,
        StorageFullError,
        TransactionFailedError,
        UnrepairableStoreError,
    )
    from storage.log import (
        ENTRY_OVERHEAD_BYTES,
        Entry,
        EntryKind,
        EntryLike,
        HardState,
        LogStore,
        ReadResult,
        SegmentedLog,
        SegmentInfo,
        StoreCapacity,
        disk_free_bytes,
    )
    from storage.segment_file import (
        SegmentFileInfo,
        SegmentFileReceiver,
        read_segment_file_chunk,
        read_segment_file_info,
    )

__all__ = [
    # the log
    "LogStore",
    "StoreCapacity",
    "disk_free_bytes",
    "SegmentedLog",
    "ENTRY_OVERHEAD_BYTES",
    "StorageConfig",
    "Entry",
    "EntryKind",
    "EntryLike",
    "HardState",
    "SegmentInfo",
    "ReadResult",
    "SegmentFileInfo",
    "read_segment_file_info",
    "read_segment_file_chunk",
    "SegmentFileReceiver",
    # record batches
    "BatchHeader",
    "Compression",
    "HEADER_SIZE",
    "headers_type",
    "record_schema",
    "encode_batch",
    "encode_arrow_batch",
    "decode_batches",
    "iter_batches",
    "read_header",
    "validate_batch",
    "first_offset_at_or_after",
    # check and repair
    "check_store",
    "repair_store",
    "set_aside_store",
    "CheckReport",
    "LogCheck",
    "Problem",
    "RepairReport",
    "Dropped",
    # errors
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

# module -> the public names it defines (errors: every name of __all__ ending in "Error")
_MODULES: dict[str, tuple[str, ...]] = {
    "storage.log": (
        "LogStore",
        "StoreCapacity",
        "disk_free_bytes",
        "SegmentedLog",
        "ENTRY_OVERHEAD_BYTES",
        "Entry",
        "EntryKind",
        "EntryLike",
        "HardState",
        "SegmentInfo",
        "ReadResult",
    ),
    "storage.config": ("StorageConfig",),
    "storage.segment_file": (
        "SegmentFileInfo",
        "read_segment_file_info",
        "read_segment_file_chunk",
        "SegmentFileReceiver",
    ),
    "storage.batch": (
        "BatchHeader",
        "Compression",
        "HEADER_SIZE",
        "headers_type",
        "record_schema",
        "encode_batch",
        "encode_arrow_batch",
        "decode_batches",
        "iter_batches",
        "read_header",
        "validate_batch",
        "first_offset_at_or_after",
    ),
    "storage.check": (
        "check_store",
        "repair_store",
        "set_aside_store",
        "CheckReport",
        "LogCheck",
        "Problem",
        "RepairReport",
        "Dropped",
    ),
    "storage.errors": tuple(name for name in __all__ if name.endswith("Error")),
}
_MODULE_OF = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
