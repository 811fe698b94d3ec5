"""Replicas that apply the same log reach the same state, byte for byte, however they got there."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.controller import (
    ClusterState,
    apply,
    decode_command,
    decode_snapshot,
    encode_command,
    encode_snapshot,
)
from multiraft.controller.state import Command

from .strategies import BOOTSTRAP, LOGS, any_commands


@settings(max_examples=150, deadline=None)
@given(LOGS, st.data())
def test_replicas_applying_the_same_log_have_identical_snapshots(log: tuple[Command, ...], data: st.DataObject) -> None:
    restart_at = data.draw(st.integers(0, len(log)))
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=len(log), max_size=len(log)))
    first, second = ClusterState(), ClusterState()
    index = 0
    for position, (command, gap) in enumerate(zip(log, gaps, strict=True)):
        index += gap  # not every Raft entry is a command
        if position == restart_at:  # the second replica restarts from a snapshot here
            second = decode_snapshot(encode_snapshot(second))
        first, expected = apply(first, index, command)
        second, got = apply(second, index, decode_command(encode_command(command)))
        assert (type(got.error), got.outcome, got.changed) == (type(expected.error), expected.outcome, expected.changed)
        assert str(got.error) == str(expected.error)
    assert encode_snapshot(first) == encode_snapshot(second)
    assert first == second


@settings(max_examples=150, deadline=None)
@given(LOGS)
def test_every_command_keeps_the_state_consistent_and_a_failed_one_changes_nothing(log: tuple[Command, ...]) -> None:
    state = ClusterState()
    for index, command in enumerate(log, start=1):
        after, result = apply(state, index, command)
        assert after.invariant_violations() == []
        assert after.applied_index == index
        if result.ok and result.changed:
            assert after.version == state.version + 1
        else:
            assert after == replace(state, applied_index=index)
        state = after


@settings(max_examples=200, deadline=None)
@given(st.lists(any_commands(), min_size=1, max_size=10))
def test_any_decodable_command_applies_without_raising(commands: list[Command]) -> None:
    state = ClusterState()
    for index, command in enumerate((*BOOTSTRAP, *commands), start=1):
        state, _ = apply(state, index, decode_command(encode_command(command)))
        assert state.invariant_violations() == []
