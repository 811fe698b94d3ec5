"""A write that fails part-way (the LMDB map is full, the store is out of segments) raises a typed error, the
log answers as it did before the call, and a rollback (or a restart) brings back exactly what was synced."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import (
    Entry,
    EntryKind,
    HardState,
    LogStore,
    SegmentedLog,
    StorageConfig,
    StorageError,
    StorageFullError,
    TransactionFailedError,
    encode_batch,
)

MiB = 1024 * 1024
TINY_MAP = StorageConfig(map_size_bytes=16 * MiB, segment_bytes=256 * 1024)
BIG_MAP = StorageConfig(map_size_bytes=64 * MiB, segment_bytes=256 * 1024)
PAYLOAD = 60 * 1024  # four entries per segment: every append below rolls at least once


def _entries(first: int, count: int, term: int = 1) -> list[Entry]:
    return [
        Entry(i, term, EntryKind.DATA, 1_000 + i, encode_batch([bytes([i % 251]) * PAYLOAD], timestamps_ms=1_000 + i))
        for i in range(first, first + count)
    ]


def _answers(log: SegmentedLog) -> tuple[object, ...]:
    """Everything the log answers from its own bookkeeping, without reading entries."""
    return (log.first_index(), log.last_index(), log.next_offset(), log.segments(), log.hard_state(), log.size_bytes())


def _fill_until_full(store: LogStore, log: SegmentedLog, *, sync_each: bool, limit: int) -> StorageFullError:
    for _ in range(limit):
        try:
            log.append(_entries(log.last_index() + 1, 16 if sync_each else 5))
            if sync_each:
                store.sync()
        except StorageFullError as full:
            return full
    raise AssertionError(f"a 16 MiB map still had room after {limit} appends")


def test_an_append_that_fills_the_map_fails_typed_and_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    store = LogStore.open(tmp_path, TINY_MAP)
    log = store.log("t", 0)
    log.set_hard_state(HardState(1, 1, 0))
    _fill_until_full(store, log, sync_each=True, limit=40)  # ~1 MiB per synced round
    store.rollback()
    synced = log.entries(log.first_index(), log.last_index() + 1)
    synced_bytes = log.read(0, 1 << 30).data
    assert len(synced) > 100  # most of the map holds synced entries

    # Unsynced appends fill the rest; the one that does not fit fails part-way, after a roll.
    appended_before = 0
    for _ in range(20):
        before = _answers(log)
        try:
            log.append(_entries(log.last_index() + 1, 5))
        except StorageFullError as full:
            assert "map is full" in str(full)
            break
        appended_before += 1
    else:
        raise AssertionError("the map never filled")
    assert _answers(log) == before  # nothing of the failed append shows, not even its new segments
    assert log.read(0, 1 << 30).data == synced_bytes  # readers of synced data never noticed

    # The transaction is unusable now: every call that needs it says so with a storage error, never lmdb's.
    with pytest.raises(TransactionFailedError) as raised:
        log.set_hard_state(HardState(2, 1, 0))
    assert isinstance(raised.value, StorageError) and isinstance(raised.value.__cause__, StorageFullError)
    with pytest.raises(TransactionFailedError):
        log.entries(log.first_index(), log.last_index() + 1)
    assert log.hard_state() == HardState(1, 1, 0)

    store.rollback()  # what the node does on any storage error: the round is discarded
    assert log.entries(log.first_index(), log.last_index() + 1) == synced
    assert log.hard_state() == HardState(1, 1, 0)
    store.close()

    with LogStore.open(tmp_path, BIG_MAP) as store:  # a restart with a bigger map goes on where it stopped
        log = store.log("t", 0)
        assert log.entries(log.first_index(), log.last_index() + 1) == synced
        log.append(_entries(log.last_index() + 1, 5))
        log.set_hard_state(HardState(2, 1, 0))
        store.sync()
        assert log.read(0, 1 << 30).data.startswith(synced_bytes)
        assert log.hard_state() == HardState(2, 1, 0)


def test_a_sync_after_a_failed_write_rolls_back_and_the_store_goes_on(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, TINY_MAP) as store:
        log = store.log("t", 0)
        log.append(_entries(1, 3))
        store.sync()
        synced = log.entries(1, 4)
        _fill_until_full(store, log, sync_each=False, limit=60)
        with pytest.raises(TransactionFailedError):
            store.sync()
        assert log.entries(1, log.last_index() + 1) == synced
        log.append(_entries(4, 3))  # the store is usable again
        store.sync()
        assert log.last_index() == 6


def test_a_large_attribute_on_a_full_map_raises_storage_full(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, TINY_MAP) as store:
        log = store.log("t", 0)
        _fill_until_full(store, log, sync_each=True, limit=40)
        store.rollback()
        last = log.last_index()
        with pytest.raises(StorageFullError):
            log.set_attribute("snapshot", b"x" * 4 * MiB)
        store.rollback()
        assert (log.last_index(), log.attribute("snapshot")) == (last, None)


def test_an_append_that_runs_out_of_segments_after_a_roll_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    config = StorageConfig(segment_bytes=256 * 1024, max_segments=3)
    with LogStore.open(tmp_path, config) as store:
        log = store.log("t", 0)
        log.append(_entries(1, 6))  # segments 1-4 and 5-6: two of three slots
        store.sync()
        log.append(_entries(7, 2))  # unsynced, in the active segment
        before = _answers(log)
        entries_before = log.entries(1, 9)
        with pytest.raises(StorageFullError, match="max_segments"):
            log.append(_entries(9, 8))  # 9-12 fill a third segment; 13 needs a fourth
        assert _answers(log) == before
        assert len(log.segments()) == 2
        store.rollback()
        assert log.entries(1, log.last_index() + 1) == entries_before[:6]
        log.drop_before(5)  # retention frees a slot...
        log.append(_entries(7, 8))  # ...and the same append fits
        store.sync()
        assert [(s.base_index, s.last_index) for s in log.segments()] == [(5, 8), (9, 12), (13, 14)]
