"""Model-based test: random sequences of append / truncate / roll / drop_before / sync / reopen / crash
against a plain in-memory model of the log. Every read must give the same answer.

The model states the log's contract in a few lines: entries in order, segments cut by size, age and roll(),
offsets assigned in order, and after a crash exactly what was last synced.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from storage import (
    ENTRY_OVERHEAD_BYTES,
    CompactedError,
    Entry,
    EntryKind,
    HardState,
    LogStore,
    StorageConfig,
    decode_batches,
    encode_batch,
    read_header,
)

CONFIG = StorageConfig(segment_bytes=1500, segment_ms=100)
KINDS = [EntryKind.DATA] * 4 + [EntryKind.NOOP, EntryKind.CONTROL]
HEADER = ENTRY_OVERHEAD_BYTES


@dataclass
class ModelSegment:
    base_index: int
    base_offset: int
    entries: list[Entry] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(HEADER + len(e.payload) for e in self.entries)

    @property
    def first_ts(self) -> int:
        return next((e.timestamp_ms for e in self.entries if e.timestamp_ms > 0), -1)

    @property
    def max_ts(self) -> int:
        return max((e.timestamp_ms for e in self.entries if e.timestamp_ms > 0), default=-1)

    @property
    def last_index(self) -> int:
        return self.base_index + len(self.entries) - 1


def count_of(entry: Entry) -> int:
    return read_header(entry.payload).record_count if entry.kind == EntryKind.DATA else 0


@dataclass
class Model:
    compaction: tuple[int, int] = (0, 0)
    segments: list[ModelSegment] = field(default_factory=lambda: [ModelSegment(1, 0)])
    hard_state: HardState = field(default_factory=HardState)

    def entries(self) -> list[Entry]:
        return [e for s in self.segments for e in s.entries]

    @property
    def last_index(self) -> int:
        entries = self.entries()
        return entries[-1].index if entries else self.compaction[0]

    @property
    def next_offset(self) -> int:
        offset = self.segments[0].base_offset
        for segment in self.segments:
            offset = segment.base_offset + sum(count_of(e) for e in segment.entries)
        return offset

    def term(self, index: int) -> int:
        if index == self.compaction[0]:
            return self.compaction[1]
        return next(e.term for e in self.entries() if e.index == index)

    def append(self, entries: list[Entry]) -> None:
        self.truncate(entries[0].index)
        for entry in entries:
            active = self.segments[-1]
            age_roll = entry.timestamp_ms > 0 and active.first_ts > 0
            if active.entries and (
                active.size + HEADER + len(entry.payload) > CONFIG.segment_bytes
                or (age_roll and entry.timestamp_ms - active.first_ts >= CONFIG.segment_ms)
            ):
                self.segments.append(ModelSegment(entry.index, self.next_offset))
            self.segments[-1].entries.append(entry)

    def truncate(self, from_index: int) -> None:
        if from_index > self.last_index:
            return
        while len(self.segments) > 1 and self.segments[-1].base_index >= from_index:
            self.segments.pop()
        active = self.segments[-1]
        active.entries = [e for e in active.entries if e.index < from_index]

    def roll(self) -> None:
        active = self.segments[-1]
        if active.entries:
            self.segments.append(ModelSegment(active.last_index + 1, self.next_offset))

    def drop_before(self, index: int) -> None:
        while len(self.segments) > 1 and self.segments[0].last_index < index:
            dropped = self.segments.pop(0)
            self.compaction = (dropped.last_index, dropped.entries[-1].term)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="logmodel-"))
        self.store = LogStore.open(self.dir, CONFIG)
        self.log = self.store.log("t", 0)
        self.model = Model()
        self.synced = copy.deepcopy(self.model)
        self.clock = 1_000
        self.term = 1

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _entry(self, index: int, kind: EntryKind, records: int, size: int, advance: int) -> Entry:
        self.clock += advance
        if kind == EntryKind.DATA:
            stamps = [self.clock - i for i in range(records)]
            payload = encode_batch([bytes([index % 251]) * size] * records, timestamps_ms=stamps)
        else:
            payload = bytes([index % 251]) * size if kind == EntryKind.CONTROL else b""
        timestamp = 0 if kind == EntryKind.NOOP else self.clock
        return Entry(index, self.term, kind, timestamp, payload)

    @rule(
        kinds=st.lists(
            st.sampled_from([EntryKind.DATA] * 4 + [EntryKind.NOOP, EntryKind.CONTROL]), min_size=1, max_size=6
        ),
        records=st.integers(1, 5),
        size=st.integers(0, 120),
        advance=st.sampled_from([0, 1, 30, 99, 150]),
        overwrite_back=st.integers(0, 3),
        new_term=st.booleans(),
    )
    def append(
        self, kinds: list[EntryKind], records: int, size: int, advance: int, overwrite_back: int, new_term: bool
    ) -> None:
        first = max(self.model.last_index + 1 - overwrite_back, self.model.compaction[0] + 1)
        if first <= self.model.last_index or new_term:
            self.term += 1  # overwriting a suffix is what a new leader does
        entries = [self._entry(first + i, kind, records, size, advance) for i, kind in enumerate(kinds)]
        self.log.append(entries)
        self.model.append(entries)

    @rule(back=st.integers(0, 8))
    def truncate(self, back: int) -> None:
        from_index = max(self.model.last_index - back, self.model.compaction[0] + 1)
        self.log.truncate_suffix(from_index)
        self.model.truncate(from_index)

    @rule()
    def roll(self) -> None:
        self.log.roll()
        self.model.roll()

    @rule(ahead=st.integers(0, 40))
    def drop_before(self, ahead: int) -> None:
        index = self.model.compaction[0] + ahead
        self.log.drop_before(index)
        self.model.drop_before(index)

    @rule(term=st.integers(0, 50), vote=st.integers(0, 3))
    def set_hard_state(self, term: int, vote: int) -> None:
        state = HardState(term, vote, self.model.last_index)
        self.log.set_hard_state(state)
        self.model.hard_state = state

    @rule()
    def sync(self) -> None:
        self.store.sync()
        self.synced = copy.deepcopy(self.model)

    @rule()
    def reopen(self) -> None:
        self.store.close()  # a clean close syncs
        self.synced = copy.deepcopy(self.model)
        self.store = LogStore.open(self.dir, CONFIG)
        self.log = self.store.log("t", 0)

    @rule()
    def crash(self) -> None:
        # Abandon the unsynced transaction, as a kill -9 would: only the last synced state comes back.
        self.store.rollback()
        self.store.close()
        self.model = copy.deepcopy(self.synced)
        self.store = LogStore.open(self.dir, CONFIG)
        self.log = self.store.log("t", 0)

    @invariant()
    def reads_match_the_model(self) -> None:
        model, log = self.model, self.log
        assert log.first_index() == model.compaction[0] + 1
        assert log.last_index() == model.last_index
        assert log.compaction_point() == model.compaction
        assert log.next_offset() == model.next_offset
        assert log.hard_state() == model.hard_state
        expected = model.entries()
        got = log.entries(log.first_index(), log.last_index() + 1)
        assert [(e.index, e.term, e.kind, e.timestamp_ms) for e in got] == [
            (e.index, e.term, e.kind, e.timestamp_ms) for e in expected
        ]
        for mine, theirs in zip(got, expected, strict=True):
            if mine.kind == EntryKind.DATA:
                assert mine.payload[8:] == theirs.payload[8:]  # all but the base offset the log wrote
            else:
                assert mine.payload == theirs.payload
        assert [log.term(e.index) for e in expected] == [e.term for e in expected]
        assert log.term(model.compaction[0]) == model.compaction[1]
        layout = [
            (
                s.base_index,
                s.last_index,
                s.base_offset,
                s.entry_count,
                s.size_bytes,
                s.first_timestamp_ms,
                s.max_timestamp_ms,
            )
            for s in log.segments()
        ]
        assert layout == [
            (s.base_index, s.last_index, s.base_offset, len(s.entries), s.size, s.first_ts, s.max_ts)
            for s in model.segments
        ]

    @invariant()
    def synced_reads_match_the_synced_model(self) -> None:
        synced = self.synced
        start, end = self.log.synced_offsets()
        assert (start, end) == (synced.segments[0].base_offset, synced.next_offset)
        records = []
        for entry in synced.entries():
            if entry.kind == EntryKind.DATA:
                records += [(entry.index, i) for i in range(count_of(entry))]
        if end > start:
            table = decode_batches(self.log.read(start, 1 << 30).data)
            offsets = table.column("offset").to_pylist()
            assert offsets == list(range(start, end))
            assert len(offsets) == len(records)
        try:
            self.log.read(start - 1, 10) if start else None
        except CompactedError:
            pass
        else:
            assert start == 0


LogMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_log_matches_its_model = LogMachine.TestCase
