"""The checker: what a history must satisfy, whatever the faults.

* Every acknowledged record is in the final log exactly once, at the offset its acknowledgement named, and
  in send order per producer and key (``lost``, ``misplaced``, ``duplicated``, ``reordered``).
* Nothing is read that was never sent (``unexpected``), and nothing read during the run differs from what
  the final log holds at that offset, so no read saw an uncommitted record (``uncommitted_reads``).
* A group's committed offsets never go backwards, nor below a commit acknowledged before they were read
  (``offset_regressions``).
* After the faults heal every replica the final placement names is byte-identical (``divergent_replicas``,
  from the runner's offline comparison recorded in the history), and no node still holds the log of a
  replica moved off it once the removal bound has passed (``retained_replicas``).
* Availability: the longest stretch a partition acknowledged nothing while producers sent, and how long the
  cluster took after the last heal to acknowledge a new write (``recovery_s``, within a bound).

Records whose send failed or timed out (``info``) may be in the log, once, or not at all.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from multiraft.tools.nemesis.history import Event

__all__ = ["CheckResult", "check"]

_EXAMPLES = 5  # how many examples of each anomaly a result keeps


@dataclass
class CheckResult:
    operations: int = 0
    acknowledged: int = 0
    indeterminate: int = 0
    read_back: int = 0
    lost: int = 0
    unreadable: int = 0
    """Acknowledged, and beyond the position where the final read was stopped by errors."""
    misplaced: int = 0
    duplicated: int = 0
    reordered: int = 0
    unexpected: int = 0
    uncommitted_reads: int = 0
    offset_regressions: int = 0
    divergent_replicas: int = 0
    final_read_complete: bool = False
    longest_unavailability_s: float = 0.0
    recovery_s: float | None = None
    recovery_bound_s: float = 60.0
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    client_crashes: int = 0
    stalled_drains: int = 0
    """Churn whose drained node still held replicas when the bound ran out (it could not be removed)."""
    harness_errors: int = 0
    """Steps of the runner that failed (an exception the run recorded instead of aborting the batch)."""
    retained_replicas: int = 0
    """Logs a node still stored, the removal bound after the final placement, of partitions it no longer
    holds (or stores that could not be looked at)."""
    read_up_to: dict[int, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def anomalies(self) -> dict[str, int]:
        return {
            name: count
            for name, count in (
                ("lost", self.lost),
                ("unreadable", self.unreadable),
                ("misplaced", self.misplaced),
                ("duplicated", self.duplicated),
                ("reordered", self.reordered),
                ("unexpected", self.unexpected),
                ("uncommitted_reads", self.uncommitted_reads),
                ("offset_regressions", self.offset_regressions),
                ("divergent_replicas", self.divergent_replicas),
                ("client_crashes", self.client_crashes),
                ("stalled_drains", self.stalled_drains),
                ("retained_replicas", self.retained_replicas),
                ("harness_errors", self.harness_errors),
            )
            if count
        }

    @property
    def recovered(self) -> bool:
        return self.recovery_s is not None and self.recovery_s <= self.recovery_bound_s

    @property
    def valid(self) -> bool:
        return not self.anomalies and self.final_read_complete and self.recovered

    def problems(self) -> list[str]:
        found = [f"{name}: {count} (e.g. {self.examples.get(name, [])})" for name, count in self.anomalies.items()]
        if not self.final_read_complete:
            found.append(f"final read incomplete: {self.examples.get('final_read', [])}")
        if not self.recovered:
            found.append(f"no write acknowledged within {self.recovery_bound_s}s of the last heal")
        return found

    def _example(self, kind: str, text: str) -> None:
        examples = self.examples.setdefault(kind, [])
        if len(examples) < _EXAMPLES:
            examples.append(text)


def check(events: Iterable[Event], *, recovery_bound_s: float = 60.0) -> CheckResult:
    """Check a history (see the module docstring); never raises on a bad history, it reports it."""
    history = list(events)
    result = CheckResult(recovery_bound_s=recovery_bound_s)
    result.operations = sum(1 for e in history if e.type == "invoke")
    result.client_crashes = sum(1 for e in history if e.f == "crash")
    for event in history:
        if event.f == "crash":
            result._example("client_crashes", f"{event.process}: {event.value.get('error')}")
        elif event.f == "harness" and event.type == "fail":
            result.harness_errors += 1
            result._example("harness_errors", str(event.value.get("error")))
        elif event.f == "drain" and event.type == "info":
            result.stalled_drains += 1
            result._example("stalled_drains", f"node {event.value.get('node')}: {event.value.get('error')}")
    result.faults.update(str(e.value["kind"]) for e in history if e.f == "fault" and e.type == "ok")

    sent = {str(e.value["value"]): e for e in history if e.f == "send" and e.type == "invoke"}
    acked = {str(e.value["value"]): e for e in history if e.f == "send" and e.type == "ok"}
    result.acknowledged = len(acked)
    unknown = {str(e.value["value"]) for e in history if e.f == "send" and e.type == "info"}
    result.indeterminate = len(unknown - set(acked))

    final = _final_log(history, result)
    _check_final(result, sent, acked, final)
    _check_reads(result, history, sent, final)
    _check_offsets(result, history)
    _check_replicas(result, history)
    _check_removals(result, history)
    _check_availability(result, history)
    return result


def _final_log(history: list[Event], result: CheckResult) -> dict[tuple[int, int], str | None]:
    """(partition, offset) -> value, from the runner's final read."""
    log: dict[tuple[int, int], str | None] = {}
    reads = [e for e in history if e.f == "final-read" and e.type != "invoke"]
    for event in reads:
        if event.type != "ok":
            result._example("final_read", str(event.value.get("error")))
        for partition, offset, _key, value in event.value.get("rows", ()):
            log[(int(partition), int(offset))] = value
        for partition, position in event.value.get("positions", {}).items():
            result.read_up_to[int(partition)] = int(position)
    result.final_read_complete = bool(reads) and all(e.type == "ok" for e in reads)
    return log


def _check_final(
    result: CheckResult, sent: dict[str, Event], acked: dict[str, Event], final: dict[tuple[int, int], str | None]
) -> None:
    where: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for position, value in final.items():
        if value is not None:
            where[value].append(position)
    result.read_back = len(where)
    for value, positions in where.items():
        if value not in sent:
            result.unexpected += 1
            result._example("unexpected", f"{value!r} at {positions}")
        if len(positions) > 1:
            result.duplicated += 1
            result._example("duplicated", f"{value!r} at {sorted(positions)}")
    for value, event in acked.items():
        found = where.get(value)
        partition, offset = int(event.value["partition"]), int(event.value["offset"])
        if not found and not result.final_read_complete and offset >= result.read_up_to.get(partition, 0):
            result.unreadable += 1  # beyond where the final read could get: not known lost, not readable
            result._example("unreadable", f"{value!r} acknowledged at {partition}/{offset}")
        elif not found:
            result.lost += 1
            result._example("lost", f"{value!r} acknowledged at {event.value['partition']}/{event.value['offset']}")
        elif (int(event.value["partition"]), int(event.value["offset"])) not in found:
            result.misplaced += 1
            result._example(
                "misplaced",
                f"{value!r} acknowledged at {event.value['partition']}/{event.value['offset']}, found at {found}",
            )
    # Per producer and key, acknowledged values sit in the log in the order they were sent.
    order: dict[tuple[str, str], list[tuple[int, tuple[int, int]]]] = collections.defaultdict(list)
    for value, event in acked.items():
        spots = where.get(value)
        if spots:
            producer, _, number = value.rpartition(":")
            order[(producer, str(event.value["key"]))].append((int(number), min(spots)))
    for (producer, key), items in order.items():
        items.sort()
        for (n1, p1), (n2, p2) in itertools.pairwise(items):
            if p2[0] != p1[0] or p2[1] < p1[1]:
                result.reordered += 1
                result._example("reordered", f"{producer} key {key}: #{n1} at {p1}, #{n2} at {p2}")


def _check_reads(
    result: CheckResult, history: list[Event], sent: dict[str, Event], final: dict[tuple[int, int], str | None]
) -> None:
    for event in history:
        if event.f != "read" or event.type != "ok":
            continue
        for partition, offset, _key, value in event.value["rows"]:
            if value is not None and value not in sent:
                result.unexpected += 1
                result._example("unexpected", f"read {value!r} at {partition}/{offset}")
            position = (int(partition), int(offset))
            if result.final_read_complete and final.get(position, value) != value:
                result.uncommitted_reads += 1
                result._example(
                    "uncommitted_reads",
                    f"read {value!r} at {partition}/{offset} at {event.time_s:.2f}s;"
                    f" the log holds {final.get(position)!r}",
                )


def _check_offsets(result: CheckResult, history: list[Event]) -> None:
    acknowledged: dict[str, int] = {}  # partition -> highest offset whose commit was acknowledged
    floor_at_invoke: dict[str, int] = {}
    last_read: dict[str, int] = {}
    for event in history:
        if event.f == "commit" and event.type == "ok":
            for partition, offset in event.value["offsets"].items():
                acknowledged[partition] = max(acknowledged.get(partition, -1), int(offset))
        elif event.f == "committed" and event.type == "invoke":
            floor_at_invoke = dict(acknowledged)
        elif event.f == "committed" and event.type == "ok":
            offsets = event.value["offsets"]
            for partition, floor in floor_at_invoke.items():
                seen = int(offsets.get(partition, -1))
                if seen < floor or seen < last_read.get(partition, -1):
                    result.offset_regressions += 1
                    result._example(
                        "offset_regressions",
                        f"partition {partition}: read {seen} at {event.time_s:.2f}s after an acknowledged {floor}"
                        f" and a read {last_read.get(partition, -1)}",
                    )
            for partition, offset in offsets.items():
                last_read[partition] = max(last_read.get(partition, -1), int(offset))


def _check_replicas(result: CheckResult, history: list[Event]) -> None:
    for event in history:
        if event.f == "replicas" and event.type == "ok":
            for difference in event.value.get("divergent", []):
                result.divergent_replicas += 1
                result._example("divergent_replicas", str(difference))
        elif event.f == "replicas" and event.type in ("fail", "info"):
            result.divergent_replicas += 1
            result._example("divergent_replicas", f"not compared: {event.value.get('error')}")


def _check_removals(result: CheckResult, history: list[Event]) -> None:
    # Only the last wait counts: the runner waits again when the placement changed meanwhile (a later move),
    # and what an earlier placement moved off a node a later one may have given back to it.
    removals = [event for event in history if event.f == "removals"]
    for event in removals[-1:]:
        if event.type not in ("info", "fail"):
            continue
        kept = [str(k) for k in event.value.get("kept", [])]
        bound = event.value.get("bound_s")
        if not kept:  # the stores could not be looked at
            result.retained_replicas += 1
            result._example("retained_replicas", f"not checked: {event.value.get('error')}")
        for where in kept:
            result.retained_replicas += 1
            result._example("retained_replicas", f"{where} still stored {bound}s after the final placement")


def _check_availability(result: CheckResult, history: list[Event]) -> None:
    sends = [e for e in history if e.f == "send"]
    if not sends:
        return
    last_invoke = max(e.time_s for e in sends if e.type == "invoke")
    acks: dict[int, list[float]] = collections.defaultdict(list)
    for event in sends:
        if event.type == "ok":
            acks[int(event.value["partition"])].append(event.time_s)
    longest = 0.0
    for times in acks.values():
        times.sort()
        gaps = [b - a for a, b in itertools.pairwise(times)]
        longest = max([longest, *gaps, max(0.0, last_invoke - times[-1])])
    result.longest_unavailability_s = round(longest, 3)
    heals = [e.time_s for e in history if e.f == "heal-all" and e.type == "ok"]
    if not heals:
        return
    healed = heals[-1]
    invoked = {str(e.value["value"]): e.time_s for e in sends if e.type == "invoke"}
    after = [e.time_s for e in sends if e.type == "ok" and invoked.get(str(e.value["value"]), -1.0) >= healed]
    if after:
        result.recovery_s = round(min(after) - healed, 3)
