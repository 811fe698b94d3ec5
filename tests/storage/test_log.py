"""SegmentedLog and LogStore, scenario by scenario."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from storage import (
    ENTRY_OVERHEAD_BYTES,
    BeforeLogStartError,
    BeyondLogEndError,
    Entry,
    EntryKind,
    EntryTooLargeError,
    HardState,
    InvalidEntryError,
    LogClosedError,
    LogStore,
    SegmentedLog,
    StorageArgumentError,
    StorageConfig,
    StorageConfigError,
    decode_batches,
    encode_batch,
    read_header,
)
from tests.storage._helpers import SMALL, batch, data, noop


def test_appended_entries_read_back_identically_after_sync_and_reopen(tmp_path: Path) -> None:
    entries = [noop(1), data(2, timestamp_ms=5), Entry(3, 2, EntryKind.CONTROL, 7, b"cmd"), data(4, 2)]
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("orders", 0)
        log.append(entries)
        written = log.entries(1, 5)
        store.sync()
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("orders", 0)
        assert (log.first_index(), log.last_index()) == (1, 4)
        assert log.entries(1, 5) == written
        assert [(e.index, e.term, e.kind, e.timestamp_ms) for e in written] == [
            (e.index, e.term, e.kind, e.timestamp_ms) for e in entries
        ]
        assert written[2].payload == b"cmd"
        assert [log.term(i) for i in range(5)] == [0, 1, 1, 2, 2]


def test_data_entries_get_consecutive_offsets_written_into_their_batches(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(1, count=3), noop(2), data(3, count=5), data(4, count=1)])
    assert log.next_offset() == 9
    offsets = [read_header(e.payload).base_offset for e in log.entries(1, 5) if e.kind == EntryKind.DATA]
    assert offsets == [0, 3, 8]
    store.sync()
    table = decode_batches(log.read(0, 1 << 20).data)
    assert table.column("offset").to_pylist() == list(range(9))


def test_a_segment_rolls_before_an_entry_would_exceed_segment_bytes(store: LogStore) -> None:
    log = store.log("t", 0)
    entry_size = ENTRY_OVERHEAD_BYTES + len(batch())
    per_segment = SMALL.segment_bytes // entry_size
    log.append([data(i) for i in range(1, 3 * per_segment + 1)])
    segments = log.segments()
    assert [s.entry_count for s in segments] == [per_segment] * 3
    assert all(s.size_bytes <= SMALL.segment_bytes for s in segments)
    assert [s.sealed for s in segments] == [True, True, False]
    assert [s.base_index for s in segments] == [1, per_segment + 1, 2 * per_segment + 1]


def test_a_segment_rolls_at_the_first_entry_segment_ms_after_its_first_timestamp(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(1, timestamp_ms=10_000), noop(2), data(3, timestamp_ms=10_999)])
    log.append([data(4, timestamp_ms=11_000), data(5, timestamp_ms=11_500)])
    assert [(s.base_index, s.first_timestamp_ms, s.max_timestamp_ms) for s in log.segments()] == [
        (1, 10_000, 10_999),
        (4, 11_000, 11_500),
    ]


def test_segment_age_comes_from_persisted_entries_not_from_when_the_log_was_opened(tmp_path: Path) -> None:
    # laminarmq measured segment age from Instant::now() at open, so age reset on every restart.
    with LogStore.open(tmp_path, SMALL) as store:
        store.log("t", 0).append([data(1, timestamp_ms=1_000)])
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("t", 0)
        log.append([data(2, timestamp_ms=1_999)])
        log.append([data(3, timestamp_ms=2_000)])
        assert [s.base_index for s in log.segments()] == [1, 3]


def _feed(log: SegmentedLog, entries: list[Entry], chunks: list[int]) -> None:
    position = 0
    for size in chunks:
        log.append(entries[position : position + size])
        position += size
    log.append(entries[position:])


def test_replicas_that_apply_the_same_entries_hold_the_same_segments(tmp_path: Path) -> None:
    rng = random.Random(7)
    entries = []
    clock = 50_000
    for index in range(1, 300):
        clock += rng.choice([0, 10, 200, 700])
        if rng.random() < 0.2:
            entries.append(noop(index, 1, clock))
        else:
            entries.append(
                data(index, 1, count=rng.randint(1, 20), timestamp_ms=clock, value=b"x" * rng.randint(1, 90))
            )
    layouts = []
    for replica in range(3):
        path = tmp_path / f"replica{replica}"
        chunks = [rng.randint(1, 40) for _ in range(8)]
        with LogStore.open(path, SMALL) as store:
            _feed(store.log("t", 0), entries[:150], chunks)
        with LogStore.open(path, SMALL) as store:  # a restart in the middle must not change anything
            log = store.log("t", 0)
            _feed(log, entries[150:], chunks)
            layouts.append([(s.base_index, s.last_index, s.base_offset, s.size_bytes) for s in log.segments()])
    assert layouts[0] == layouts[1] == layouts[2]
    assert len(layouts[0]) > 5


def test_a_conflicting_suffix_is_replaced_and_its_offsets_reused(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i, 1, count=2) for i in range(1, 40)])
    store.sync()
    offset_of_20 = read_header(log.entries(20, 21)[0].payload).base_offset
    log.append([data(20, 3, count=5), data(21, 3, count=5)])  # a new leader's entries overwrite from 20
    assert log.last_index() == 21
    assert [log.term(i) for i in (19, 20, 21)] == [1, 3, 3]
    assert read_header(log.entries(20, 21)[0].payload).base_offset == offset_of_20
    assert log.next_offset() == offset_of_20 + 10
    store.sync()
    table = decode_batches(log.read(0, 1 << 20).data)
    assert table.column("offset").to_pylist() == list(range(offset_of_20 + 10))


def test_truncating_to_the_first_index_empties_the_log_but_keeps_its_start(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i) for i in range(1, 60)])
    log.truncate_suffix(1)
    assert (log.first_index(), log.last_index(), log.next_offset(), len(log.segments())) == (1, 0, 0, 1)
    log.append([data(1, 2)])
    assert log.term(1) == 2


def test_drop_before_removes_whole_sealed_segments_only(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i, 1 + i // 30) for i in range(1, 100)])
    segments = log.segments()
    cut = segments[2].base_index + 1  # inside the third segment
    dropped = log.drop_before(cut)
    assert [s.base_index for s in dropped] == [segments[0].base_index, segments[1].base_index]
    assert log.first_index() == segments[2].base_index
    assert log.compaction_point() == (segments[1].last_index, log.term(segments[1].last_index))
    assert log.start_offset() == segments[2].base_offset
    with pytest.raises(BeforeLogStartError):
        log.entries(1, 3)
    with pytest.raises(BeforeLogStartError):
        log.term(1)
    assert log.drop_before(10**9)[-1].base_index == segments[-2].base_index  # never the active segment
    assert len(log.segments()) == 1


def test_space_freed_by_drop_before_is_reused_by_later_appends(tmp_path: Path) -> None:
    """Retention keeps the file at its high-water mark: appends after a drop fill the pages it freed."""
    mib = 1024 * 1024
    with LogStore.open(tmp_path, StorageConfig(segment_bytes=mib)) as store:
        log = store.log("t", 0)
        data_file = tmp_path / "log.lmdb" / "data.mdb"

        def append_synced(count: int) -> None:
            for _ in range(0, count, 4):  # a node commits a few 64 KiB batches per round
                first = log.last_index() + 1
                log.append([data(i, count=1, value=b"r" * 64 * 1024) for i in range(first, first + 4)])
                store.sync()

        append_synced(128)  # 8 MiB
        high_water = data_file.stat().st_size
        rewritten = 0
        for _ in range(3):
            segments = log.segments()
            dropped = log.drop_before(segments[len(segments) // 2].base_index)
            store.sync()
            append_synced(sum(s.entry_count for s in dropped))
            rewritten += sum(s.size_bytes for s in dropped)
        assert rewritten >= 10 * mib
        assert log.size_bytes() <= 8.5 * mib  # as much live data as before...
        assert data_file.stat().st_size - high_water < mib  # ...in about the same file, not 10 MiB more


def test_retention_helpers_pick_a_prefix_of_sealed_segments(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i, timestamp_ms=1_000 * i) for i in range(1, 12)])  # segment_ms=1000: one entry each
    log.append([data(i, timestamp_ms=50_000) for i in range(12, 14)])
    assert len(log.segments()) == 12
    older = log.segments_older_than(retention_ms=5_000, now_ms=10_000)
    assert [s.base_index for s in older] == [1, 2, 3, 4, 5]
    assert log.segments_older_than(retention_ms=0, now_ms=10**9)[-1].base_index == 11  # active never listed
    size = log.segments()[0].size_bytes
    over = log.segments_over_size(log.size_bytes() - 2 * size)
    assert [s.base_index for s in over] == [1, 2]
    assert log.segments_over_size(log.size_bytes()) == []


def test_reads_find_the_batch_holding_any_offset(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i, count=i % 4 + 1) if i % 5 else noop(i) for i in range(1, 120)])
    store.sync()
    end = log.next_offset()
    for offset in range(end):
        result = log.read(offset, 1)
        first = decode_batches(result.data).column("offset").to_pylist()
        assert first[0] <= offset <= first[-1]
        assert result.next_offset == first[-1] + 1
    assert log.read(end, 100).data == b""
    with pytest.raises(BeyondLogEndError):
        log.read(end + 1, 100)


def test_a_read_stops_at_max_bytes_but_returns_at_least_one_batch_and_never_passes_max_offset(
    store: LogStore,
) -> None:
    log = store.log("t", 0)
    log.append([data(i, count=10) for i in range(1, 50)])
    store.sync()
    one = len(log.entries(1, 2)[0].payload)
    assert log.read(0, 1).batch_count == 1
    assert log.read(0, 3 * one).batch_count == 3
    assert log.read(0, 3 * one - 1).batch_count == 2
    capped = log.read(5, 1 << 20, max_offset=42)
    offsets = decode_batches(capped.data).column("offset").to_pylist()
    assert offsets[0] == 0 and offsets[-1] == 39 and capped.next_offset == 40


def test_the_time_index_finds_the_first_record_at_or_after_a_timestamp(store: LogStore) -> None:
    rng = random.Random(3)
    log = store.log("t", 0)
    all_timestamps: list[int] = []
    for index in range(1, 80):
        stamps = [rng.randint(0, 5_000) for _ in range(rng.randint(1, 6))]
        log.append(
            [
                Entry(
                    index,
                    1,
                    EntryKind.DATA,
                    1000 + index * 50,
                    encode_batch([b"r"] * len(stamps), timestamps_ms=stamps),
                )
            ]
        )
        all_timestamps += stamps
    store.sync()
    for wanted in [0, 1, 17, 2_500, 4_999, 5_000, 5_001, *rng.sample(range(5_000), 40)]:
        expected = next((offset for offset, ts in enumerate(all_timestamps) if ts >= wanted), None)
        assert log.offset_for_timestamp(wanted) == expected, wanted


def test_readers_see_only_synced_data(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(1)])
    store.sync()
    log.append([data(2)])
    assert log.synced_offsets() == (0, 3)
    assert log.read(0, 1 << 20).next_offset == 3
    store.sync()
    assert log.read(0, 1 << 20).next_offset == 6


def test_rollback_discards_everything_since_the_last_sync(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i) for i in range(1, 10)])
    log.set_hard_state(HardState(1, 2, 5))
    store.sync()
    before = (log.segments(), log.hard_state(), log.next_offset())
    log.append([data(i, 2) for i in range(5, 40)])
    log.set_hard_state(HardState(2, 3, 30))
    other = store.log("other", 1)
    other.append([data(1)])
    store.rollback()
    assert (log.segments(), log.hard_state(), log.next_offset()) == before
    assert store.logs() == [("t", 0)]
    assert log.entries(1, 10)[-1].term == 1


def test_hard_state_and_attributes_survive_a_restart(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("t", 3)
        log.set_hard_state(HardState(term=4, vote=2, commit=0))
        log.set_attribute("applied", b"\x01\x02")
        log.set_attribute("gone", b"x")
        log.set_attribute("gone", None)
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("t", 3)
        assert log.hard_state() == HardState(4, 2, 0)
        assert log.attribute("applied") == b"\x01\x02"
        assert log.attribute("gone") is None


def test_reset_starts_the_log_after_a_snapshot(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i) for i in range(1, 30)])
    log.reset(index=500, term=7, next_offset=9_000)
    assert (log.first_index(), log.last_index(), log.term(500), log.next_offset()) == (501, 500, 7, 9_000)
    log.append([data(501, 7)])
    assert read_header(log.entries(501, 502)[0].payload).base_offset == 9_000
    with pytest.raises(InvalidEntryError):
        log.append([data(503, 7)])


def test_deleting_a_log_removes_it_and_frees_its_segments(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("t", 0)
        log.append([data(i) for i in range(1, 100)])
        store.sync()
        store.delete_log("t", 0)
        with pytest.raises(LogClosedError):
            log.last_index()
        store.sync()
        assert store.logs() == []
        fresh = store.log("t", 0)
        assert fresh.last_index() == 0
    with LogStore.open(tmp_path, SMALL) as store:
        assert store.logs() == [("t", 0)]
        assert store.log("t", 0).last_index() == 0


def test_a_held_transaction_serves_the_owners_reads_and_the_next_sync_commits_it(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, SMALL) as store:
        store.log("t", 0).append([data(i) for i in range(1, 4)])
        store.sync()
        store.hold_transaction()
        assert store.writes_pending
        assert store.log("t", 0).last_index() == 3 and store.log("t", 0).entries(1, 4)[-1].index == 3
        store.log("t", 1)  # written in the held transaction
        store.sync()
        assert not store.writes_pending
    with LogStore.open(tmp_path, SMALL) as store:
        assert store.logs() == [("t", 0), ("t", 1)]


def test_a_log_exists_once_created_until_deleted_or_rolled_back_and_across_a_restart(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, SMALL) as store:
        assert not store.has_log("t", 0)
        store.log("t", 0)
        assert store.has_log("t", 0) and not store.has_log("t", 1)
        store.sync()
        store.log("t", 1)
        store.rollback()
        assert store.has_log("t", 0) and not store.has_log("t", 1)
    with LogStore.open(tmp_path, SMALL) as store:
        assert store.has_log("t", 0)  # known from the file alone, before anything opened it
        store.delete_log("t", 0)
        assert not store.has_log("t", 0)


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ([data(12)], InvalidEntryError, "gap"),
        ([data(5), data(7)], InvalidEntryError, "consecutive"),
        ([data(11, term=1)], InvalidEntryError, "lower than the term"),
        ([data(11, 3), data(12, 2)], InvalidEntryError, "lower than the term"),
        ([Entry(11, 2, 9, 0, b"")], InvalidEntryError, "unknown kind"),  # type: ignore[arg-type]
        ([Entry(11, 2, EntryKind.DATA, 0, b"not a batch")], InvalidEntryError, "not a record batch"),
        ([Entry(11, 2, EntryKind.DATA, 0, batch() + b"tail")], InvalidEntryError, "payload length"),
        ([Entry(11, 2, EntryKind.NOOP, -5, b"")], InvalidEntryError, "negative timestamp"),
        ([Entry(11, 2, EntryKind.CONTROL, 0, b"x" * 70_000)], EntryTooLargeError, "max_entry_bytes"),
        ([data(0, 2)], InvalidEntryError, "before the first index"),
    ],
)
def test_bad_input_raises_a_typed_error_and_leaves_the_log_intact(
    tmp_path: Path, bad: list[Entry], error: type[Exception], message: str
) -> None:
    config = StorageConfig(segment_bytes=4096, max_entry_bytes=65536)
    with LogStore.open(tmp_path, config) as store:
        log = store.log("t", 0)
        log.append([data(i, 1 if i < 6 else 2) for i in range(1, 11)])
        before = (log.entries(1, 11), log.segments(), log.next_offset())
        with pytest.raises(error, match=message):
            log.append(bad)
        assert (log.entries(1, 11), log.segments(), log.next_offset()) == before
        log.append([data(11, 2)])


def test_reads_outside_the_log_raise_typed_errors(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i) for i in range(1, 5)])
    with pytest.raises(BeyondLogEndError):
        log.entries(1, 6)
    with pytest.raises(BeyondLogEndError):
        log.term(5)
    with pytest.raises(StorageArgumentError):
        log.entries(3, 2)
    with pytest.raises(StorageArgumentError):
        log.read(0, 0)
    with pytest.raises(StorageArgumentError):
        store.log("bad/name", 0)
    with pytest.raises(StorageArgumentError):
        store.log("t", -1)


def test_a_closed_store_refuses_every_call(tmp_path: Path) -> None:
    store = LogStore.open(tmp_path, SMALL)
    log = store.log("t", 0)
    store.close()
    for call in (lambda: log.append([data(1)]), log.last_index, lambda: log.read(0, 10), store.sync, store.logs):
        with pytest.raises(LogClosedError):
            call()


def test_entries_respect_max_bytes_but_return_at_least_one(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(i) for i in range(1, 20)])
    size = len(log.entries(1, 2)[0].payload)
    assert len(log.entries(1, 20, max_bytes=1)) == 1
    assert len(log.entries(1, 20, max_bytes=5 * size)) == 5
    assert len(log.entries(1, 20, max_bytes=None)) == 19


@pytest.mark.parametrize(
    ("field", "value"),
    [("segment_bytes", 10), ("segment_ms", 0), ("max_entry_bytes", 1), ("map_size_bytes", 1), ("max_segments", 0)],
)
def test_a_wrong_config_names_its_field(field: str, value: int) -> None:
    with pytest.raises(StorageConfigError, match=f"^{field}:"):
        StorageConfig(**{field: value}).validate()


def test_reader_threads_always_see_a_consistent_synced_log(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([data(1, count=4)])
    store.sync()
    failures: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        rng = random.Random(threading.get_ident())
        while not stop.is_set():
            start, end = log.synced_offsets()
            try:
                offset = rng.randint(start, max(start, end - 1))
                result = log.read(offset, rng.randint(1, 5000))
                offsets = decode_batches(result.data).column("offset").to_pylist()
                assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
                assert offsets[0] <= offset <= offsets[-1] or not offsets
            except BeforeLogStartError:
                pass  # retention moved the start between synced_offsets() and read()
            except BaseException as exc:
                failures.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 3
    index = 2
    while time.monotonic() < deadline and not failures:
        log.append([data(i, count=4) for i in range(index, index + 20)])
        index += 20
        if index % 100 == 2:
            log.drop_before(index - 60)
        store.sync()
    stop.set()
    for thread in threads:
        thread.join(5)
    assert not failures, failures[0]
    assert index > 100
