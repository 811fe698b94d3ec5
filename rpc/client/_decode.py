"""The consumer's decoding of fetched batches: in bulk, and, when a batch cannot be decoded, everything
before it plus a :class:`CorruptRecordBatchError` that says where the bad batch is and where reading can
go on (so a consumer never stalls silently on it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiraft.errors import CorruptRecordBatchError
from rpc.client._records import TopicPartition
from storage.batch import decode_batches, read_header, validate_batch
from storage.errors import BatchFormatError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["decode_fetched", "records_before"]


def decode_fetched(
    data: bytes | memoryview, tp: TopicPartition, fetch_offset: int, response_next_offset: int
) -> tuple[pa.Table | None, CorruptRecordBatchError | None]:
    """The records of a fetched run of batches, and the error of the first batch that cannot be decoded
    (with the records before it: the table holds those)."""
    try:
        return decode_batches(data, include_headers=True), None
    except BatchFormatError:
        pass
    view = memoryview(data)
    pos = 0
    offset = fetch_offset  # of the bad batch: where the good ones end, unless its own header says
    failure: BatchFormatError | None = None
    for _ in range(len(view)):  # each round moves past one batch or stops
        if pos >= len(view):
            break
        try:
            header = validate_batch(view, pos)
            decode_batches(view[pos : pos + header.length], include_headers=True)
        except BatchFormatError as exc:
            failure = exc
            break
        offset = max(offset, header.next_offset)
        pos += header.length
    good = decode_batches(view[:pos], include_headers=True) if pos else None
    if failure is None:  # (each batch decodes alone: cannot happen, but never lose the records)
        return decode_batches(view, include_headers=True, verify=False), None
    try:
        claimed = read_header(view, pos)
        offset, next_offset = max(offset, claimed.base_offset), max(offset + 1, claimed.next_offset)
    except BatchFormatError:
        next_offset = max(offset + 1, response_next_offset)  # unframed: skip what the response held
    error = CorruptRecordBatchError(
        f"{tp.topic}/{tp.partition}: the batch at offset {offset} cannot be decoded ({failure}); "
        f"Consumer.skip_batch() or a seek to offset {next_offset} reads on past it",
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        next_offset=next_offset,
    )
    return good, error


def records_before(table: pa.Table, offset: int) -> int:
    """How many leading rows of a decoded fetch lie before ``offset`` (offsets ascend)."""
    import numpy as np

    column = table.column("offset")
    if not table.num_rows or column[0].as_py() >= offset:
        return 0
    # From the buffers: Array.to_numpy() would import pandas (about a second) on first use.
    arrays = [
        np.frombuffer(chunk.buffers()[1], dtype=np.int64, count=len(chunk), offset=chunk.offset * 8)
        for chunk in column.chunks
    ]
    return int(np.searchsorted(np.concatenate(arrays) if len(arrays) > 1 else arrays[0], offset))
