"""How ``Producer.send_batch()`` splits its columns: each record's batched size, the partition each key
goes to, the records of each partition in call order, and runs of them that fit one wire batch.

All of it works on whole columns (numpy and Arrow), never on single records in Python; kept apart from the
producer, which checks sizes against the topic and queues the runs (:mod:`rpc.client._bulk`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import crc32c

from multiraft.errors import UnknownPartitionError
from rpc.client._accumulator import RECORD_OVERHEAD
from rpc.client._bulk import BulkColumns

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    Int64Array = npt.NDArray[np.int64]

__all__ = ["record_sizes", "key_partitions", "take", "chunk_bounds", "partition_records"]


def _byte_lengths(array: pa.Array) -> Int64Array:
    """Bytes per entry of a binary or string array (0 for null)."""
    import numpy as np
    import pyarrow.compute as pc

    lengths: Int64Array = pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths


def record_sizes(columns: BulkColumns) -> Int64Array:
    """:func:`record_size` of every record, computed on whole columns."""
    import numpy as np

    sizes = _byte_lengths(columns.values) + RECORD_OVERHEAD
    if columns.keys is not None:
        sizes += _byte_lengths(columns.keys)
    headers = columns.headers
    if headers is not None and len(headers):
        offsets = headers.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        entries = headers.values
        entry_sizes = 8 + _byte_lengths(entries.field("key")) + _byte_lengths(entries.field("value"))
        running = np.zeros(len(entry_sizes) + 1, dtype=np.int64)
        np.cumsum(entry_sizes, out=running[1:])
        per_record = running[offsets[1:]] - running[offsets[:-1]]
        if headers.null_count:
            per_record[headers.is_null().to_numpy(zero_copy_only=False)] = 0
        sizes += per_record
    return sizes


def key_partitions(keys: pa.Array, partitions: int) -> Int64Array:
    """``crc32c(key) % partitions`` of every key (the partitioner of ``send()``), -1 for a null key."""
    import numpy as np
    import pyarrow as pa

    large = pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type)
    binary = keys.cast(pa.large_binary() if large else pa.binary())
    present = binary.drop_null() if binary.null_count else binary
    # crc32c runs in C over the keys' bytes; to_pylist() makes the bytes objects it takes.
    checksums = np.fromiter(map(crc32c.crc32c, present.to_pylist()), dtype=np.int64, count=len(present))
    if not binary.null_count:
        result: Int64Array = checksums % partitions
        return result
    result = np.full(len(binary), -1, dtype=np.int64)
    result[binary.is_valid().to_numpy(zero_copy_only=False)] = checksums % partitions
    return result


def take(columns: BulkColumns, order: Int64Array) -> BulkColumns:
    """The records in ``order`` (a copy, made by Arrow and numpy)."""
    import pyarrow as pa

    indices = pa.Array.from_buffers(pa.int64(), len(order), [None, pa.py_buffer(order)])
    return BulkColumns(
        columns.values.take(indices),
        None if columns.keys is None else columns.keys.take(indices),
        None if columns.headers is None else columns.headers.take(indices),
        columns.timestamps if isinstance(columns.timestamps, int) else columns.timestamps[order],
    )


def chunk_bounds(sizes: Int64Array, budget: int) -> list[tuple[int, int, int]]:
    """Split records into runs of at most ``budget`` bytes (a larger record goes alone):
    (start, stop, bytes) of each, found with a search over the running total, not a loop over records."""
    import numpy as np

    running = np.cumsum(sizes)
    bounds: list[tuple[int, int, int]] = []
    start, before, n = 0, 0, len(sizes)
    while start < n:
        stop = max(int(np.searchsorted(running, before + budget, side="right")), start + 1)
        total = int(running[stop - 1])
        bounds.append((start, stop, total - before))
        start, before = stop, total
    return bounds


def partition_records(
    topic: str,
    partitions: int,
    columns: BulkColumns,
    sizes: Int64Array,
    partition: int | None,
    sticky_partition: Callable[[], int],
) -> tuple[list[tuple[int, BulkColumns, Int64Array]], int | None]:
    """The records of each partition they go to, in call order, and the sticky partition if one was used
    (``sticky_partition()`` is asked only when a record has no partition and no key)."""
    import numpy as np

    if partition is not None:
        if not 0 <= partition < partitions:
            raise UnknownPartitionError(
                f"topic {topic!r} has {partitions} partition{'' if partitions == 1 else 's'}, "
                f"there is no partition {partition}",
                topic=topic,
                partition=partition,
            )
        return [(partition, columns, sizes)], None
    targets = None if columns.keys is None else key_partitions(columns.keys, partitions)
    sticky = None
    if targets is None or int(targets.min()) < 0:
        sticky = sticky_partition()
        if targets is None:
            return [(sticky, columns, sizes)], sticky
        targets[targets < 0] = sticky
    first = int(targets[0])
    if bool((targets == first).all()):
        return [(first, columns, sizes)], sticky
    order = np.argsort(targets, kind="stable")
    counts = np.bincount(targets, minlength=partitions)
    grouped, grouped_sizes = take(columns, order), sizes[order]
    groups = []
    start = 0
    for p in np.flatnonzero(counts).tolist():
        stop = start + int(counts[p])
        groups.append((p, grouped.slice(start, stop), grouped_sizes[start:stop]))
        start = stop
    return groups, sticky
