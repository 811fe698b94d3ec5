"""Reading :mod:`multiraft.trace` files: where each record's time went between ``send()`` and ``poll()``.

Every process (the bench's producers and its consumer, every node) writes its own file; the lines of one batch
are joined by their keys (a line that holds several keys links them: the batch's CRC to its Raft entry on
the leader, the entry to the offsets it was written at). A stage's time for a batch is its earliest line
anywhere (for ``append_received`` and ``follower_persisted``: the fastest follower, which with the leader
makes the majority of three). ``u`` lines ("everything below here reached the stage") count for every
batch they cover. The records themselves come from ``polled`` lines, written by ``multiraft bench e2e
--trace`` with each record's send time (``s``) and offset (``r``).
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["STAGES", "Batch", "read_lines", "join_batches", "breakdown", "format_breakdown"]

# The order a record goes through them (the follower's and the leader's writes overlap: the leader sends its
# appends before its own fsync).
STAGES = (
    "send",  # send() called (the record's own stamp)
    "produce_written",  # the client's sender hands the Produce to gRPC
    "leader_received",  # the leader's event loop has the batch, checked
    "proposed",  # the scheduler thread proposed it to Raft
    "append_received",  # a follower's event loop has the append
    "follower_persisted",  # a follower's fsync is done
    "leader_persisted",  # the leader's own fsync is done
    "ack_received",  # a follower's acknowledgement reached the leader's event loop
    "applied",  # committed and applied on the leader (scheduler thread)
    "hw_visible",  # the new high watermark is visible on the leader's event loop
    "pushed",  # the Subscribe stream hands the batch to gRPC
    "client_received",  # the consumer's stream thread has the response
    "client_decoded",  # poll() took it in (decoded into the partition's buffer)
    "polled",  # poll() returned the record
)


@dataclass
class Batch:
    """What the trace knows of one batch: its stage times (ns) and where it was written."""

    times: dict[str, int] = field(default_factory=dict)
    partition: str | None = None  # "topic/partition"
    base_offset: int = -1
    count: int = 0
    entry: tuple[str, int] | None = None  # ("g<group>", index)


Line = tuple[int, str, list[str]]


def read_lines(directory: str | Path) -> list[Line]:
    """Every well-formed line of every ``*.trace`` file in ``directory`` (a torn last line is skipped)."""
    lines: list[Line] = []
    for path in sorted(Path(directory).glob("*.trace")):
        for text in path.read_text(encoding="ascii", errors="replace").splitlines():
            parts = text.split()
            if len(parts) >= 3 and parts[0].isdigit():
                lines.append((int(parts[0]), parts[1], parts[2:]))
    return lines


class _Keys:
    """Union-find over keys: keys that ever shared a line name one batch."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, key: str) -> str:
        parent = self.parent
        parent.setdefault(key, key)
        root = key
        for _ in range(len(parent)):  # a chain is never longer than the keys
            if parent[root] == root:
                break
            root = parent[root]
        for _ in range(len(parent)):
            if parent[key] == root:
                break
            parent[key], key = root, parent[key]
        return root

    def union(self, first: str, second: str) -> None:
        a, b = self.find(first), self.find(second)
        if a != b:
            self.parent[b] = a


def _split_at(text: str) -> tuple[str, int]:
    stream, _, number = text.rpartition("@")
    return stream, int(number)


def join_batches(lines: Iterable[Line]) -> list[Batch]:
    """The batches the lines describe, with the earliest time of each stage."""
    keys = _Keys()
    keyed: list[tuple[int, str, list[str]]] = []
    ranges: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)  # (stage, stream) -> (t, upto)
    for t, stage, line_keys in lines:
        if stage == "polled":
            continue
        own = [k for k in line_keys if k[0] in "cgb"]
        for key in line_keys:
            if key[0] == "u":
                stream, upto = _split_at(key[1:])
                ranges[(stage, stream)].append((t, upto))
        if own:
            for key in own[1:]:
                keys.union(own[0], key)
            keyed.append((t, stage, own))
    batches: dict[str, Batch] = {}
    for t, stage, own in keyed:
        batch = batches.setdefault(keys.find(own[0]), Batch())
        if stage not in batch.times or t < batch.times[stage]:
            batch.times[stage] = t
        for key in own:
            if key[0] == "b":
                position, _, count = key[1:].rpartition("+")
                batch.partition, batch.base_offset = _split_at(position)
                batch.count = int(count)
            elif key[0] == "g":
                group, _, index = key.partition(".")
                batch.entry = (group, int(index))
    covered = {name: _earliest_cover(events) for name, events in ranges.items()}
    for batch in batches.values():
        for (stage, stream), find in covered.items():
            if batch.partition == stream and batch.count:
                at = find(batch.base_offset + batch.count)
            elif batch.entry is not None and stream == batch.entry[0]:
                at = find(batch.entry[1] + 1)
            else:
                continue
            if at is not None and (stage not in batch.times or at < batch.times[stage]):
                batch.times[stage] = at
    return list(batches.values())


def _earliest_cover(events: list[tuple[int, int]]) -> Any:
    """A function: the earliest time at which some event covered ``end`` (its upto >= end), or None."""
    events.sort()
    times, reach, best = [], [], -1
    for t, upto in events:
        if upto > best:
            best = upto
            times.append(t)
            reach.append(upto)

    def find(end: int) -> int | None:
        i = bisect.bisect_left(reach, end)
        return times[i] if i < len(times) else None

    return find


def breakdown(lines: list[Line]) -> dict[str, Any]:
    """Per stage, over the polled records the trace covers: the time since ``send()`` (median, p99) and the
    increment from the stage before (median), in milliseconds."""
    batches = [b for b in join_batches(lines) if b.partition is not None]
    by_partition: dict[str, list[Batch]] = defaultdict(list)
    for batch in batches:
        by_partition[batch.partition or ""].append(batch)
    starts: dict[str, list[int]] = {}
    for partition, items in by_partition.items():
        items.sort(key=lambda b: b.base_offset)
        starts[partition] = [b.base_offset for b in items]
    since: dict[str, list[float]] = {stage: [] for stage in STAGES}
    steps: dict[str, list[float]] = {stage: [] for stage in STAGES}
    records = 0
    for t, stage, line_keys in lines:
        if stage != "polled":
            continue
        found = [k for k in line_keys if k[0] == "r"], [k for k in line_keys if k[0] == "s"]
        if not found[0] or not found[1]:
            continue
        partition, offset = _split_at(found[0][0][1:])
        sent = int(found[1][0][1:])
        times = {"send": sent, "polled": t}
        items = by_partition.get(partition, [])
        i = bisect.bisect_right(starts.get(partition, []), offset) - 1
        if i >= 0 and offset < items[i].base_offset + items[i].count:
            times.update({k: v for k, v in items[i].times.items() if k not in times})
        records += 1
        previous = None
        for name in STAGES:
            if name not in times:
                continue
            since[name].append((times[name] - sent) / 1e6)
            if previous is not None:
                steps[name].append((times[name] - times[previous]) / 1e6)
            previous = name
    rows = []
    for name in STAGES:
        values = since[name]
        if not values:
            continue
        rows.append(
            {
                "stage": name,
                "samples": len(values),
                "since_send_p50_ms": round(statistics.median(values), 3),
                "since_send_p99_ms": round(_p99(values), 3),
                "step_p50_ms": round(statistics.median(steps[name]), 3) if steps[name] else 0.0,
                "step_p99_ms": round(_p99(steps[name]), 3) if steps[name] else 0.0,
            }
        )
    return {"records": records, "batches": len(batches), "stages": rows}


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def format_breakdown(result: dict[str, Any]) -> str:
    """A plain-text table of :func:`breakdown`'s result."""
    out = [
        f"trace: {result['records']} records in {result['batches']} batches",
        f"{'stage':<20}{'samples':>8}{'since send p50':>16}{'p99':>9}{'step p50':>10}{'step p99':>10}  (ms)",
    ]
    for row in result["stages"]:
        out.append(
            f"{row['stage']:<20}{row['samples']:>8}{row['since_send_p50_ms']:>16.3f}{row['since_send_p99_ms']:>9.3f}"
            f"{row['step_p50_ms']:>10.3f}{row['step_p99_ms']:>10.3f}"
        )
    return "\n".join(out)
