"""Checks of the quickstart's outcome that need no Spark: what the topics hold, read back with the client."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from multiraft import Admin, Consumer

__all__ = ["TopicCheck", "VerificationError", "WindowCheck", "check_events_topic", "check_windows", "read_topic"]


class VerificationError(Exception):
    """An output does not match what was produced."""


def read_topic(
    bootstrap: str, topic: str, *, timeout_s: float = 120.0, client: dict[str, Any] | None = None
) -> pa.Table:
    """Every committed record of ``topic``, from the log start to the high watermark seen at the call
    (``client``: TLS and credentials of a principal that may read it)."""
    client = client or {}
    with Admin(bootstrap, **client) as admin:
        ends = admin.list_offsets(topic, "latest")
    tables: list[pa.Table] = []
    with Consumer(bootstrap, fetch_max_bytes=16 * 1024 * 1024, **client) as consumer:
        consumer.assign([(topic, partition) for partition in ends], start="earliest")
        deadline = time.monotonic() + timeout_s
        while any(consumer.position((topic, p)) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise VerificationError(f"could not read {topic} up to its high watermarks {ends} in {timeout_s:.0f}s")
            table = consumer.poll_arrow(timeout_s=1.0, max_records=100_000)
            if table.num_rows:
                tables.append(table)
    if not tables:
        return pa.table(
            {
                "partition": pa.array([], pa.int32()),
                "offset": pa.array([], pa.int64()),
                "key": pa.array([], pa.binary()),
                "value": pa.array([], pa.binary()),
            }
        )
    table = pa.concat_tables(tables)
    # A fetch may return records past the high watermark read above (produced meanwhile): drop them.
    keep = pc.less(table["offset"], pc.cast(_lookup(table["partition"], ends), pa.int64()))
    return table.filter(keep)


def _lookup(partitions: pa.ChunkedArray, ends: dict[int, int]) -> pa.Array:
    table = pa.array([ends.get(p, 0) for p in range(max(ends, default=-1) + 1)], pa.int64())
    return pc.take(table, partitions)


@dataclass(frozen=True, slots=True)
class TopicCheck:
    records: int
    events: int
    distinct_event_ids: int
    markers: int


def check_events_topic(table: pa.Table) -> TopicCheck:
    """Counts the events of ``events`` and their distinct ids (a duplicate from a producer retry would show)."""
    values = pc.cast(table["value"], pa.string())
    # A regex over the whole column: no Python loop over hundreds of thousands of records.
    ids = pc.extract_regex(values, r'"event_id":"(?P<id>[^"]+)"')
    matched = pc.is_valid(ids)
    event_ids = pc.struct_field(ids.filter(matched), [0])
    markers = pc.sum(pc.match_substring(values, '"kind":"end_of_stream"')).as_py() or 0
    return TopicCheck(
        records=table.num_rows,
        events=len(event_ids),
        distinct_event_ids=pc.count_distinct(event_ids).as_py(),
        markers=markers,
    )


@dataclass(frozen=True, slots=True)
class WindowCheck:
    records: int
    distinct_keys: int
    windows: int
    summed_events: int


def check_windows(table: pa.Table) -> WindowCheck:
    """Reads ``events_per_minute``: the per-minute counts summed over the latest record of each key.

    In append mode Spark emits each (window, page, action) once, when the watermark passes the window's end,
    so with an exactly-once sink every key appears once: ``records == distinct_keys``.
    """
    latest: dict[bytes, dict[str, object]] = {}
    order = pc.sort_indices(table, [("partition", "ascending"), ("offset", "ascending")])
    ordered = table.take(order)
    windows: set[object] = set()
    for key, value in zip(ordered["key"].to_pylist(), ordered["value"].to_pylist(), strict=True):
        latest[key] = json.loads(value)
    summed = 0
    for row in latest.values():
        summed += int(row["events"])  # type: ignore[call-overload]
        windows.add(row["window_start"])
    return WindowCheck(records=table.num_rows, distinct_keys=len(latest), windows=len(windows), summed_events=summed)
