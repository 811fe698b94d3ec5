"""What ``poll()`` and ``poll_arrow()`` hand out: decoded tables per partition turned into Records, or into
one Arrow table with topic and partition columns."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import TYPE_CHECKING

from rpc.client._records import Record, TopicPartition
from storage.batch import headers_type, record_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["arrow_schema", "as_records", "as_table"]


def arrow_schema() -> pa.Schema:
    """Schema of :meth:`Consumer.poll_arrow` tables."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            *record_schema(),
            pa.field("headers", headers_type()),
        ]
    )


def as_records(tables: list[tuple[TopicPartition, pa.Table]]) -> list[Record]:
    """One Record per row, built column by column: the lists come from Arrow in C, and ``tuple.__new__``
    over ``zip`` makes each Record without a Python-level call per record."""
    import pyarrow as pa

    records: list[Record] = []
    int64 = pa.int64()
    for tp, table in tables:
        n = table.num_rows
        offsets = table.column("offset").to_pylist()
        # Views, not compute kernels: a cast and a sum each cost more than the rest of a small poll's records.
        timestamps = [ms for chunk in table.column("timestamp").chunks for ms in chunk.view(int64).to_pylist()]
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        headers = table.column("headers")
        header_tuples: Iterable[tuple[tuple[str, bytes | None], ...]]
        if not any(_list_entries(chunk) for chunk in headers.chunks):
            header_tuples = repeat((), n)
        else:
            header_tuples = [tuple((h["key"], h["value"]) for h in row) if row else () for row in headers.to_pylist()]
        where = repeat(tp.topic, n), repeat(tp.partition, n)
        fields = zip(*where, offsets, timestamps, keys, values, header_tuples, strict=True)
        records += map(tuple.__new__, repeat(Record, n), fields)
    return records


def _list_entries(chunk: pa.ListArray) -> int:
    """How many entries the lists of ``chunk`` hold together (its slice only)."""
    if not len(chunk):
        return 0
    list_offsets = chunk.offsets  # (of the slice: len(chunk) + 1 of them)
    return int(list_offsets[len(chunk)].as_py() - list_offsets[0].as_py())


def _repeated(tp: TopicPartition, n: int) -> tuple[pa.Array, pa.Array]:
    """The topic and partition columns of ``n`` rows, from buffers: ``pa.scalar`` would import pandas (a
    second of CPU in a consumer's first ``poll_arrow()``)."""
    import numpy as np
    import pyarrow as pa

    name = tp.topic.encode()
    if n * len(name) >= 2**31:
        raise ValueError(f"{n} rows of topic {tp.topic!r} exceed an Arrow string column; poll fewer records")
    offsets = pa.py_buffer(np.arange(0, n + 1, dtype=np.int32) * np.int32(len(name)))
    topic = pa.Array.from_buffers(pa.string(), n, [None, offsets, pa.py_buffer(name * n)])
    partition = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, tp.partition, np.int32))])
    return topic, partition


def as_table(tables: list[tuple[TopicPartition, pa.Table]]) -> pa.Table:
    import pyarrow as pa

    schema = arrow_schema()
    parts = []
    for tp, table in tables:
        parts.append(pa.Table.from_arrays([*_repeated(tp, table.num_rows), *table.columns], schema=schema))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]
