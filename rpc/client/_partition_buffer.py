"""What the consumer holds for one partition: its position, the open stream and the decoded records between
the position and the next offset to fetch; how pushed responses and polls move them; and where a ``start``
argument puts a new one."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from multiraft.errors import CorruptRecordBatchError
from rpc.client._decode import decode_fetched, records_before
from rpc.client._fetch_response import FetchResponseLike
from rpc.client._fetcher import PartitionStream
from rpc.client._records import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Reset", "Start", "PartitionBuffer", "start_point", "take_fairly", "by_topic"]

_BACKOFF_START_S = 0.02
_BACKOFF_MAX_S = 1.0


@dataclass(frozen=True, slots=True)
class Reset:
    """How to find a position: ``committed`` (then ``fallback``), ``earliest``, ``latest`` or ``timestamp``."""

    kind: str
    timestamp_ms: int = 0


Start = str | int | datetime | None
"""``None`` (committed offset, else ``auto_offset_reset``), ``"earliest"``, ``"latest"``, an offset, or a datetime."""


def start_point(start: Start, default: Reset) -> tuple[int | None, Reset | None]:
    """Where a partition starts for ``start``: an offset, or how to find one (``default`` for None)."""
    if start is None:
        return None, default
    if isinstance(start, datetime):
        return None, Reset("timestamp", round(start.timestamp() * 1000))
    if isinstance(start, str):
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest', 'latest', an offset or a datetime, not {start!r}")
        return None, Reset(start)
    if isinstance(start, int) and not isinstance(start, bool):
        if start < 0:
            raise ValueError(f"a start offset must be >= 0, got {start}")
        return start, None
    raise TypeError(f"start must be 'earliest', 'latest', an offset or a datetime, not {start!r}")


@dataclass(eq=False)
class PartitionBuffer:
    """One assigned partition (the consumer's thread)."""

    tp: TopicPartition
    position: int | None = None
    reset: Reset | None = None
    fetch_offset: int = 0  # next offset to fetch; the buffer holds [position, fetch_offset)
    buffer: pa.Table | None = None
    stream: PartitionStream | None = None  # the open Subscribe call, if any
    high_watermark: int | None = None
    max_high_watermark: int = 0
    log_start_offset: int | None = None
    backoff_s: float = 0.0
    backoff_until: float = 0.0
    corrupt: CorruptRecordBatchError | None = None  # reading stopped at a batch that cannot be decoded

    def seek(self, position: int | None, reset: Reset | None) -> None:
        self.position, self.reset, self.corrupt = position, reset, None
        self.fetch_offset = position if position is not None else 0
        self.buffer = None
        self.close_stream()

    def close_stream(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
            self.stream = None

    def back_off(self) -> None:
        """Open the next stream later (doubling, up to a second)."""
        self.backoff_s = min(max(self.backoff_s * 2, _BACKOFF_START_S), _BACKOFF_MAX_S)
        self.backoff_until = time.monotonic() + self.backoff_s

    def take_in(self, response: FetchResponseLike) -> None:
        """Decode a pushed response, in bulk, onto the buffer; a batch that cannot be decoded stops the
        partition there (``corrupt``) with the records before it kept."""
        import pyarrow as pa

        self.backoff_s = 0.0
        self.high_watermark = response.high_watermark
        self.max_high_watermark = max(self.max_high_watermark, response.high_watermark)
        self.log_start_offset = response.log_start_offset
        offset = self.fetch_offset
        batches = response.batches  # (read once: the generated message copies it on every read)
        if batches:
            table, corrupt = decode_fetched(batches, self.tp, offset, response.next_offset)
            skip = records_before(table, offset) if table is not None else 0  # a batch may start before it
            if table is not None and table.num_rows > skip:
                table = table.slice(skip) if skip else table
                self.buffer = pa.concat_tables([self.buffer, table]) if self.buffer is not None else table
            if corrupt is not None:  # stop here until the application skips it (see Consumer.poll)
                self.corrupt = corrupt
                self.close_stream()
                self.fetch_offset = max(offset, corrupt.offset)
                if self.buffer is None:
                    self.position = self.fetch_offset
                return
        self.fetch_offset = max(offset, response.next_offset)
        if self.buffer is None:
            self.position = self.fetch_offset


def take_fairly(states: list[PartitionBuffer], rotation: int, limit: int) -> list[tuple[TopicPartition, pa.Table]]:
    """Up to ``limit`` buffered records, starting at partition ``rotation`` and going round; advances positions."""
    taken: list[tuple[TopicPartition, pa.Table]] = []
    for state in states[rotation:] + states[:rotation]:
        if limit <= 0:
            break
        buffer = state.buffer
        if buffer is None:
            continue
        if buffer.num_rows <= limit:
            part, state.buffer = buffer, None
            state.position = state.fetch_offset
        else:
            part, state.buffer = buffer.slice(0, limit), buffer.slice(limit)
            state.position = int(state.buffer.column("offset")[0].as_py())
        limit -= part.num_rows
        taken.append((state.tp, part))
    return taken


def by_topic(states: Iterable[PartitionBuffer]) -> dict[str, list[PartitionBuffer]]:
    grouped: dict[str, list[PartitionBuffer]] = {}
    for state in states:
        grouped.setdefault(state.tp.topic, []).append(state)
    return grouped
