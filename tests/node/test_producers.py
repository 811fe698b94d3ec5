"""What a partition remembers of idempotent producers: duplicates are recognised, gaps refused, and the state
is the same however often entries are replayed over a checkpoint."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    UnknownProducerIdError,
)
from multiraft.node.replicas.producers import (
    REPLAY_PRODUCER_IDS_FROM,
    RETAINED_BATCHES,
    ProducerStates,
    Verdict,
    check_granted,
)
from multiraft.node.replicas.raft_log import SnapshotManifest, decode_manifest, encode_manifest


def _applied(*batches: tuple[int, int, int, int]) -> ProducerStates:
    """States after applying (producer, first sequence, count, index) batches, offsets = index * 10."""
    states = ProducerStates()
    for producer, first, count, index in batches:
        states.apply(producer, 0, first, count, index * 10, index, 1_000 + index)
    return states


def test_a_new_producer_may_start_at_any_sequence() -> None:
    assert ProducerStates().check(7, 0, 40, 3) == (Verdict.APPEND, None)


def test_a_retry_of_an_applied_batch_is_a_duplicate_with_its_offset() -> None:
    states = _applied((7, 0, 3, 1), (7, 3, 2, 2))
    verdict, original = states.check(7, 0, 0, 3)
    assert verdict is Verdict.DUPLICATE and original is not None
    assert (original.base_offset, original.entry_index, original.append_time_ms) == (10, 1, 1_001)


def test_a_retry_of_a_batch_in_flight_waits_for_it() -> None:
    states = _applied((7, 0, 3, 1))
    states.track(7, 3, 2, index=5)
    verdict, original = states.check(7, 0, 3, 2)
    assert verdict is Verdict.DUPLICATE and original is not None
    assert (original.base_offset, original.entry_index) == (-1, 5)
    assert states.check(7, 0, 5, 1) == (Verdict.APPEND, None)  # the next one follows the in-flight batch


def test_a_gap_is_refused_with_the_expected_sequence() -> None:
    states = _applied((7, 0, 3, 1))
    with pytest.raises(OutOfOrderSequenceError) as raised:
        states.check(7, 0, 9, 1)
    assert raised.value.metadata["expected_sequence"] == "3"


def test_a_retry_older_than_the_retained_batches_is_refused() -> None:
    states = _applied(*((7, i, 1, i + 1) for i in range(RETAINED_BATCHES + 1)))
    with pytest.raises(OutOfOrderSequenceError):
        states.check(7, 0, 0, 1)


def test_an_older_epoch_is_fenced() -> None:
    states = ProducerStates()
    states.apply(7, 2, 0, 1, 0, 1, 1)
    with pytest.raises(ProducerFencedError):
        states.check(7, 1, 1, 1)
    assert states.check(7, 3, 0, 1) == (Verdict.APPEND, None)  # a newer epoch starts over


def test_losing_leadership_forgets_what_was_in_flight() -> None:
    states = _applied((7, 0, 3, 1))
    states.track(7, 3, 2, index=5)
    states.forget_in_flight()
    assert states.check(7, 0, 3, 2) == (Verdict.APPEND, None)


def test_a_week_silent_producer_is_forgotten() -> None:
    states = _applied((7, 0, 1, 1), (8, 0, 1, 2))
    states.apply(8, 0, 1, 1, 30, 3, 8 * 24 * 3600 * 1000)
    states.expire(8 * 24 * 3600 * 1000)
    assert len(states) == 1
    assert states.check(7, 0, 50, 1) == (Verdict.APPEND, None)


batches = st.lists(
    st.tuples(st.integers(1, 3), st.integers(1, 4)), min_size=1, max_size=40
)  # (producer, record count) in log order


def _log(plan: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    next_sequence: dict[int, int] = {}
    entries = []
    for index, (producer, count) in enumerate(plan, start=1):
        first = next_sequence.get(producer, 0)
        next_sequence[producer] = first + count
        entries.append((producer, first, count, index))
    return entries


@given(plan=batches, checkpoint=st.integers(0, 40), replay_from=st.integers(0, 40))
def test_replaying_entries_over_a_later_checkpoint_changes_nothing(
    plan: list[tuple[int, int]], checkpoint: int, replay_from: int
) -> None:
    entries = _log(plan)
    checkpoint = min(checkpoint, len(entries))
    expected = _applied(*entries).encode()
    restored = ProducerStates.decode(_applied(*entries[:checkpoint]).encode())
    for producer, first, count, index in entries[min(replay_from, checkpoint) :]:
        restored.apply(producer, 0, first, count, index * 10, index, 1_000 + index)
    assert restored.encode() == expected


@given(plan=batches)
def test_every_retry_of_a_retained_batch_is_a_duplicate_and_the_next_batch_appends(
    plan: list[tuple[int, int]],
) -> None:
    entries = _log(plan)
    states = _applied(*entries)
    for producer in {p for p, *_ in entries}:
        mine = [e for e in entries if e[0] == producer]
        for _, first, count, index in mine[-RETAINED_BATCHES:]:
            verdict, original = states.check(producer, 0, first, count)
            assert verdict is Verdict.DUPLICATE and original is not None and original.entry_index == index
        last = mine[-1]
        assert states.check(producer, 0, last[1] + last[2], 1) == (Verdict.APPEND, None)


def test_a_snapshot_manifest_carries_the_producers_state() -> None:
    state = _applied((7, 0, 3, 1)).encode()
    manifest = SnapshotManifest(next_offset=30, segments=((2, 9),), producers=state)
    assert decode_manifest(encode_manifest(manifest)) == manifest
    assert decode_manifest(encode_manifest(SnapshotManifest(5))).producers == b""


# ------------------------------------------------------------------------------------ granted ids and epochs


@given(st.integers(1, 2**62 - 1), st.integers(1, 2**62))
def test_only_ids_below_the_controllers_high_water_mark_are_known(producer_id: int, next_producer_id: int) -> None:
    if producer_id < next_producer_id:
        check_granted(producer_id, 0, next_producer_id)
    else:
        with pytest.raises(UnknownProducerIdError):
            check_granted(producer_id, 0, next_producer_id)


@pytest.mark.parametrize("producer_id", [0, -0])
def test_id_zero_is_never_handed_out(producer_id: int) -> None:
    with pytest.raises(UnknownProducerIdError):
        check_granted(producer_id, 0, 10)


@given(st.integers(1, 2**15 - 1))
def test_initproducer_grants_epoch_zero_only(epoch: int) -> None:
    check_granted(5, 0, 10)
    with pytest.raises(InvalidProducerEpochError) as raised:
        check_granted(5, epoch, 10)
    assert raised.value.metadata == {"producer_id": "5", "epoch": str(epoch)}


@given(st.integers(REPLAY_PRODUCER_IDS_FROM, 2**63 - 1), st.integers(0, 2**15 - 1))
def test_replay_producer_ids_carry_their_owners_epochs(producer_id: int, epoch: int) -> None:
    check_granted(producer_id, epoch, 1)
