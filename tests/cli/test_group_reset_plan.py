"""``multiraft group reset-offsets`` planning, without a cluster: where each option moves a group's offsets,
clamped to [log start, high watermark] as kafka-consumer-groups clamps them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st

from multiraft.errors import InvalidArgumentError
from multiraft.tools.cli._consumer_group_reset import (
    PartitionState,
    ResetSpec,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_scope,
    plan_reset,
    reset_spec,
)

# events/0 holds offsets 10..99 (log start 10, high watermark 100), committed at 50; events/1 is empty.
STATES = {
    ("events", 0): PartitionState(log_start=10, high_watermark=100, committed=50, at_timestamp=70),
    ("events", 1): PartitionState(log_start=0, high_watermark=0, committed=None, at_timestamp=-1),
}


def _new(spec: ResetSpec, states: dict[tuple[str, int], PartitionState] = STATES) -> dict[tuple[str, int], int]:
    return {(p.topic, p.partition): p.new for p in plan_reset(spec, states)}


def test_to_earliest_and_to_latest_go_to_the_log_start_and_the_high_watermark() -> None:
    assert _new(ResetSpec("earliest")) == {("events", 0): 10, ("events", 1): 0}
    assert _new(ResetSpec("latest")) == {("events", 0): 100, ("events", 1): 0}


def test_to_offset_is_clamped_into_the_log() -> None:
    planned = plan_reset(ResetSpec("offset", 5), {("events", 0): STATES[("events", 0)]})
    assert [(p.requested, p.new, p.clamped) for p in planned] == [(5, 10, True)]
    planned = plan_reset(ResetSpec("offset", 1_000), {("events", 0): STATES[("events", 0)]})
    assert [(p.requested, p.new, p.clamped) for p in planned] == [(1_000, 100, True)]
    planned = plan_reset(ResetSpec("offset", 42), {("events", 0): STATES[("events", 0)]})
    assert [(p.current, p.new, p.clamped) for p in planned] == [(50, 42, False)]


def test_shift_by_moves_the_committed_offset_and_is_clamped() -> None:
    only_first = {("events", 0): STATES[("events", 0)]}
    assert _new(ResetSpec("shift", -15), only_first) == {("events", 0): 35}
    assert _new(ResetSpec("shift", 30), only_first) == {("events", 0): 80}
    assert _new(ResetSpec("shift", -100), only_first) == {("events", 0): 10}
    assert _new(ResetSpec("shift", 100), only_first) == {("events", 0): 100}


def test_shift_by_refuses_a_partition_with_nothing_committed() -> None:
    with pytest.raises(InvalidArgumentError, match="cannot shift events/1: the group committed no offset there"):
        plan_reset(ResetSpec("shift", 1), STATES)


def test_to_datetime_takes_the_first_offset_at_the_time_or_the_high_watermark_when_none_is() -> None:
    assert _new(ResetSpec("datetime", 1_000)) == {("events", 0): 70, ("events", 1): 0}
    later = {("events", 0): PartitionState(10, 100, 50, at_timestamp=-1)}
    assert _new(ResetSpec("datetime", 1_000), later) == {("events", 0): 100}


def test_the_plan_keeps_the_current_offset_and_is_sorted() -> None:
    states = {
        ("b", 1): PartitionState(0, 9, 3),
        ("a", 2): PartitionState(0, 9, None),
        ("b", 0): PartitionState(0, 9, 1),
    }
    planned = plan_reset(ResetSpec("latest"), states)
    assert [(p.topic, p.partition, p.current) for p in planned] == [("a", 2, None), ("b", 0, 1), ("b", 1, 3)]


@given(
    log_start=st.integers(0, 1_000),
    length=st.integers(0, 1_000),
    committed=st.none() | st.integers(0, 3_000),
    spec=st.sampled_from(["earliest", "latest", "datetime", "shift", "offset"]),
    value=st.integers(-3_000, 3_000),
    at=st.integers(-1, 3_000),
)
def test_every_planned_offset_lies_between_the_log_start_and_the_high_watermark(
    log_start: int, length: int, committed: int | None, spec: str, value: int, at: int
) -> None:
    state = PartitionState(log_start, log_start + length, committed if spec != "shift" else (committed or 0), at)
    (planned,) = plan_reset(ResetSpec(spec, value), {("t", 0): state})  # type: ignore[arg-type]
    assert log_start <= planned.new <= log_start + length
    assert planned.clamped == (planned.requested != planned.new)


def test_exactly_one_target_option_is_required() -> None:
    assert reset_spec(to_earliest=True, to_latest=False, to_datetime=None, shift_by=None, to_offset=None) == ResetSpec(
        "earliest"
    )
    assert reset_spec(to_earliest=False, to_latest=False, to_datetime=None, shift_by=-3, to_offset=None) == ResetSpec(
        "shift", -3
    )
    with pytest.raises(typer.BadParameter, match="exactly one"):
        reset_spec(to_earliest=False, to_latest=False, to_datetime=None, shift_by=None, to_offset=None)
    with pytest.raises(typer.BadParameter, match=r"exactly one of them \(got 2\)"):
        reset_spec(to_earliest=True, to_latest=False, to_datetime=None, shift_by=None, to_offset=7)
    with pytest.raises(typer.BadParameter, match="must be >= 0"):
        reset_spec(to_earliest=False, to_latest=False, to_datetime=None, shift_by=None, to_offset=-1)


def test_datetimes_are_iso_8601_with_an_optional_zone() -> None:
    assert parse_datetime_ms("2026-11-25T20:30:00Z") == 1_795_638_600_000
    assert parse_datetime_ms("2026-11-25T20:30:00.250+00:00") == 1_795_638_600_250
    assert parse_datetime_ms("2026-11-25T21:30:00+01:00") == 1_795_638_600_000
    naive = datetime(2026, 11, 25, 20, 30)  # no zone: local time, as kafka-consumer-groups reads it
    assert parse_datetime_ms("2026-11-25T20:30:00") == round(naive.timestamp() * 1000)
    assert datetime.fromtimestamp(1_795_638_600, UTC).isoformat() == "2026-11-25T20:30:00+00:00"
    with pytest.raises(typer.BadParameter, match="ISO 8601"):
        parse_datetime_ms("yesterday")


def test_a_topic_scope_names_every_partition_or_some() -> None:
    assert parse_topic_scope("events") == ("events", None)
    assert parse_topic_scope("events:2,0,2") == ("events", (0, 2))
    for bad in (":1", "events:x", "events:-1", "events:"):
        with pytest.raises(typer.BadParameter):
            parse_topic_scope(bad)


def test_by_duration_counts_an_iso_8601_duration_back_from_now() -> None:
    assert parse_duration_ms("PT1H30M") == 5_400_000
    assert parse_duration_ms("P1DT12H") == 129_600_000
    assert parse_duration_ms("pt0.5s") == 500
    assert parse_duration_ms("P2D") == 172_800_000
    spec = reset_spec(
        to_earliest=False,
        to_latest=False,
        to_datetime=None,
        shift_by=None,
        to_offset=None,
        by_duration="PT1M",
        now_ms=1_000_000,
    )
    assert spec == ResetSpec("datetime", 940_000)
    for bad in ("P", "PT", "1H", "PT1H2", "P1DT", "-PT1H"):
        with pytest.raises(typer.BadParameter, match="ISO 8601 duration"):
            parse_duration_ms(bad)
