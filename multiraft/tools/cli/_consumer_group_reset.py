"""``multiraft group reset-offsets``: where each partition's committed offset goes, planned without I/O.

The plan follows ``kafka-consumer-groups --reset-offsets``: ``--to-earliest`` (the log start),
``--to-latest`` (the high watermark), ``--to-datetime`` (the first record at or after that time; the high
watermark when none is), ``--by-duration`` (the same, that long before now), ``--shift-by N`` (the
committed offset plus N; a partition with nothing committed cannot be shifted) and ``--to-offset N``; every
new offset is clamped to [log start, high watermark].
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import typer

from multiraft.errors import InvalidArgumentError

__all__ = [
    "PartitionState",
    "PlannedOffset",
    "ResetSpec",
    "parse_datetime_ms",
    "parse_duration_ms",
    "parse_topic_scope",
    "plan_reset",
    "reset_spec",
]

ResetKind = Literal["earliest", "latest", "datetime", "shift", "offset"]


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Where to move: ``value`` is ms since the epoch (datetime), the shift (shift) or the offset (offset)."""

    kind: ResetKind
    value: int = 0


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the cluster says about one partition of a reset."""

    log_start: int
    high_watermark: int
    committed: int | None
    """The group's committed offset; None when it committed nothing here."""
    at_timestamp: int | None = None
    """``--to-datetime`` only: the first offset at or after the time, -1 when no record is."""


@dataclass(frozen=True, slots=True)
class PlannedOffset:
    topic: str
    partition: int
    current: int | None
    requested: int
    """Where the option points, before clamping."""
    new: int
    """``requested`` clamped to [log_start, high_watermark]: what is committed."""
    log_start: int
    high_watermark: int

    @property
    def clamped(self) -> bool:
        return self.new != self.requested


def reset_spec(
    *,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    shift_by: int | None,
    to_offset: int | None,
    by_duration: str | None = None,
    now_ms: int = 0,
) -> ResetSpec:
    """Exactly one of the options, or a usage error naming them (``now_ms``: the time ``by_duration`` counts
    back from)."""
    chosen: list[ResetSpec] = []
    if to_earliest:
        chosen.append(ResetSpec("earliest"))
    if to_latest:
        chosen.append(ResetSpec("latest"))
    if to_datetime is not None:
        chosen.append(ResetSpec("datetime", parse_datetime_ms(to_datetime)))
    if by_duration is not None:
        chosen.append(ResetSpec("datetime", max(0, now_ms - parse_duration_ms(by_duration))))
    if shift_by is not None:
        chosen.append(ResetSpec("shift", shift_by))
    if to_offset is not None:
        if to_offset < 0:
            raise typer.BadParameter(f"must be >= 0, got {to_offset}", param_hint="--to-offset")
        chosen.append(ResetSpec("offset", to_offset))
    if len(chosen) != 1:
        raise typer.BadParameter(
            "give exactly one of them" + (f" (got {len(chosen)})" if chosen else ""),
            param_hint="--to-earliest/--to-latest/--to-datetime/--by-duration/--shift-by/--to-offset",
        )
    return chosen[0]


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 (``2026-11-25T20:30:00``, ``...T20:30:00.250Z``, ``...+01:00``) to ms since the epoch; without
    a zone it is local time, as kafka-consumer-groups reads it."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            f"expected an ISO 8601 time like 2026-11-25T20:30:00 or 2026-11-25T20:30:00Z, got {text!r}",
            param_hint="--to-datetime",
        ) from None
    return round(moment.timestamp() * 1000)


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """ISO 8601 duration as kafka-consumer-groups takes it (``PT1H30M``, ``P1DT12H``, ``PT0.5S``) to ms."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groups()) or text.strip().upper().endswith("T"):
        raise typer.BadParameter(
            f"expected an ISO 8601 duration like PT1H30M or P1DT12H, got {text!r}", param_hint="--by-duration"
        )
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return round((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def parse_topic_scope(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``T`` -> every partition of T; ``T:0,2`` -> partitions 0 and 2 of T."""
    topic, sep, partitions = text.partition(":")
    if not topic.strip():
        raise typer.BadParameter(f"expected TOPIC or TOPIC:P,P, got {text!r}", param_hint="--topic")
    if not sep:
        return topic.strip(), None
    numbers: list[int] = []
    for item in partitions.split(","):
        try:
            number = int(item.strip())
        except ValueError:
            raise typer.BadParameter(
                f"partition {item.strip()!r} of {text!r} is not a number", param_hint="--topic"
            ) from None
        if number < 0:
            raise typer.BadParameter(f"partition {number} of {text!r} must be >= 0", param_hint="--topic")
        numbers.append(number)
    return topic.strip(), tuple(sorted(set(numbers)))


def _requested(spec: ResetSpec, topic: str, partition: int, state: PartitionState) -> int:
    if spec.kind == "earliest":
        return state.log_start
    if spec.kind == "latest":
        return state.high_watermark
    if spec.kind == "offset":
        return spec.value
    if spec.kind == "shift":
        if state.committed is None:
            raise InvalidArgumentError(
                f"cannot shift {topic}/{partition}: the group committed no offset there "
                "(use --to-earliest, --to-latest, --to-datetime or --to-offset)",
                field="shift_by",
            )
        return state.committed + spec.value
    if state.at_timestamp is None:
        raise InvalidArgumentError(f"{topic}/{partition}: no offset was looked up for the time", field="to_datetime")
    return state.high_watermark if state.at_timestamp < 0 else state.at_timestamp


def plan_reset(spec: ResetSpec, partitions: Mapping[tuple[str, int], PartitionState]) -> list[PlannedOffset]:
    """The new committed offset of every partition, sorted by topic and partition."""
    planned: list[PlannedOffset] = []
    for (topic, partition), state in sorted(partitions.items()):
        requested = _requested(spec, topic, partition, state)
        new = min(max(requested, state.log_start), state.high_watermark)
        planned.append(
            PlannedOffset(topic, partition, state.committed, requested, new, state.log_start, state.high_watermark)
        )
    return planned
