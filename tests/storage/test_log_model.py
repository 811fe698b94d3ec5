"""Model-based test: random sequences of append / truncate / roll / drop_before / sync / reopen / crash
against a plain in-memory model of the log. Every read must give the same answer.

The model states the log's contract in a few lines: entries in order, segments cut by size, age and roll(),
offsets assigned in order, and after a crash exactly what was last synced. Reads are checked against it byte
for byte: the owner's (entries with max_bytes, term, offset_after, the retention helpers) on the current
model, and the consumers' (read at any offset with max_bytes and max_offset, the time index) on the synced one.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from storage import (
    ENTRY_OVERHEAD_BYTES,
    BeforeLogStartError,
    BeyondLogEndError,
    Entry,
    EntryKind,
    HardState,
    LogStore,
    ReadResult,
    StorageConfig,
    decode_batches,
    encode_batch,
    read_header,
)
from storage.batch import set_base_offset

CONFIG = StorageConfig(segment_bytes=1500, segment_ms=100)
KINDS = [EntryKind.DATA] * 4 + [EntryKind.NOOP, EntryKind.CONTROL]
HEADER = ENTRY_OVERHEAD_BYTES
NUDGE = st.sampled_from([-1, 0, 0, 1])
SOMETIMES = st.sampled_from([False, False, False, True])


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


def stored(entry: Entry, base_offset: int) -> Entry:
    """The entry as the log keeps it: a data entry's batch carries the base offset the log gave it."""
    if entry.kind != EntryKind.DATA:
        return entry
    payload = bytearray(entry.payload)
    set_base_offset(payload, base_offset)
    return Entry(entry.index, entry.term, entry.kind, entry.timestamp_ms, bytes(payload))


@dataclass
class Model:
    compaction: tuple[int, int] = (0, 0)
    segments: list[ModelSegment] = field(default_factory=lambda: [ModelSegment(1, 0)])
    hard_state: HardState = field(default_factory=HardState)

    def entries(self) -> list[Entry]:
        return [e for s in self.segments for e in s.entries]

    def stored_entries(self) -> list[tuple[Entry, int]]:
        """Every entry as stored, with the log's next offset after it."""
        out: list[tuple[Entry, int]] = []
        for segment in self.segments:
            offset = segment.base_offset
            for entry in segment.entries:
                out.append((stored(entry, offset), offset + count_of(entry)))
                offset += count_of(entry)
        return out

    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset

    def entries_between(self, lo: int, hi: int, max_bytes: int | None) -> list[Entry]:
        out: list[Entry] = []
        size = 0
        for entry, _ in self.stored_entries():
            if not lo <= entry.index < hi:
                continue
            if out and max_bytes is not None and size + len(entry.payload) > max_bytes:
                break
            out.append(entry)
            size += len(entry.payload)
        return out

    def offset_after(self, index: int) -> int:
        if index == self.compaction[0]:
            return self.start_offset
        return next(after for entry, after in self.stored_entries() if entry.index == index)

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> ReadResult:
        start, end = self.start_offset, self.next_offset
        if offset < start:
            raise BeforeLogStartError(offset)
        if offset > end:
            raise BeyondLogEndError(offset)
        limit = end if max_offset is None else min(max_offset, end)
        parts: list[bytes] = []
        next_offset = offset
        for entry, after in self.stored_entries():
            if offset >= limit:
                break
            if entry.kind != EntryKind.DATA or after <= offset:
                continue
            if after > limit or (parts and sum(map(len, parts)) + len(entry.payload) > max_bytes):
                break
            parts.append(entry.payload)
            next_offset = after
        return ReadResult(b"".join(parts), len(parts), next_offset, start, end)

    def records(self, records_of: dict[Entry, list[tuple[int, bytes]]]) -> list[tuple[int, int, bytes]]:
        """(offset, timestamp, value) of every record, in offset order."""
        offset = self.start_offset
        out: list[tuple[int, int, bytes]] = []
        for entry in self.entries():
            for timestamp_ms, value in records_of[entry]:
                out.append((offset, timestamp_ms, value))
                offset += 1
        return out

    def offset_for_timestamp(self, timestamp_ms: int, records_of: dict[Entry, list[tuple[int, bytes]]]) -> int | None:
        return next((offset for offset, ts, _ in self.records(records_of) if ts >= timestamp_ms), None)

    def segments_older_than(self, retention_ms: int, now_ms: int) -> list[int]:
        prefix: list[int] = []
        for segment in self.segments[:-1]:
            if segment.max_ts > now_ms - retention_ms:
                break
            prefix.append(segment.base_index)
        return prefix

    def segments_over_size(self, retention_bytes: int) -> list[int]:
        excess = sum(s.size for s in self.segments) - retention_bytes
        prefix: list[int] = []
        for segment in self.segments[:-1]:
            if excess <= 0:
                break
            prefix.append(segment.base_index)
            excess -= segment.size
        return prefix

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
        self.synced: Model | None = None  # the log has never been synced: consumers cannot read it yet
        self.clock = 1_000
        self.term = 1
        self.records: dict[Entry, list[tuple[int, bytes]]] = {}  # each entry's records: (timestamp, value)
        self.synced_checked: Model | None = None

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _entry(self, index: int, kind: EntryKind, records: int, size: int, advance: int) -> Entry:
        self.clock += advance
        stamps = [self.clock - i for i in range(records)]  # out of order within a batch, as producers send them
        values = [bytes([(index + i) % 251]) * size for i in range(records)]
        if kind == EntryKind.DATA:
            payload = encode_batch(values, timestamps_ms=stamps)
        else:
            payload = bytes([index % 251]) * size if kind == EntryKind.CONTROL else b""
        timestamp = 0 if kind == EntryKind.NOOP else self.clock
        entry = Entry(index, self.term, kind, timestamp, payload)
        self.records[entry] = list(zip(stamps, values, strict=True)) if kind == EntryKind.DATA else []
        return entry

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
        self.model = copy.deepcopy(self.synced) if self.synced else Model()
        self.store = LogStore.open(self.dir, CONFIG)
        self.log = self.store.log("t", 0)

    # ------------------------------------------------------------------------- reads of the owner

    @invariant()
    def reads_match_the_model(self) -> None:
        model, log = self.model, self.log
        assert log.first_index() == model.compaction[0] + 1
        assert log.last_index() == model.last_index
        assert log.compaction_point() == model.compaction
        assert log.next_offset() == model.next_offset
        assert log.start_offset() == model.start_offset
        assert log.hard_state() == model.hard_state
        expected = [entry for entry, _ in model.stored_entries()]
        assert log.entries(log.first_index(), log.last_index() + 1) == expected  # every byte, base offsets too
        assert [log.term(e.index) for e in expected] == [e.term for e in expected]
        assert log.term(model.compaction[0]) == model.compaction[1]
        for index in {model.compaction[0], model.last_index}:
            assert log.offset_after(index) == model.offset_after(index)
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
        assert log.size_bytes() == sum(s.size for s in model.segments)

    @invariant()
    def owner_reads_agree_at_every_limit(self) -> None:
        """Limits at an exact boundary of the data, give or take one: where an off-by-one hides."""
        model, log = self.model, self.log
        segments = model.segments
        total = sum(s.size for s in segments)
        for kept in range(len(segments) + 1):
            for nudge in (-1, 0, 1):
                retention_bytes = max(total - sum(s.size for s in segments[:kept]) + nudge, 0)
                got = [s.base_index for s in log.segments_over_size(retention_bytes)]
                assert got == model.segments_over_size(retention_bytes), retention_bytes
        for segment in segments:
            for retention_ms in (0, 100):
                for nudge in (-1, 0, 1):
                    now_ms = segment.max_ts + retention_ms + nudge
                    got = [s.base_index for s in log.segments_older_than(retention_ms, now_ms)]
                    assert got == model.segments_older_than(retention_ms, now_ms), (retention_ms, now_ms)
        lo, hi = model.compaction[0] + 1, model.last_index + 1
        sizes = [len(e.payload) for e in model.entries()]
        for count in {1, 2, len(sizes) // 2}:
            for nudge in (-1, 0, 1):
                max_bytes = max(sum(sizes[:count]) + nudge, 0)
                assert log.entries(lo, hi, max_bytes) == model.entries_between(lo, hi, max_bytes), max_bytes

    # Random limits, drawn near a boundary of the data.

    @rule(lo=st.integers(0, 1000), length=st.integers(0, 12), pick=st.integers(0, 12), nudge=NUDGE, unlimited=SOMETIMES)
    def entries_with_max_bytes(self, lo: int, length: int, pick: int, nudge: int, unlimited: bool) -> None:
        first, last = self.model.compaction[0] + 1, self.model.last_index
        lo = first + lo % (last - first + 2)
        hi = min(lo + length, last + 1)
        sizes = [len(e.payload) for e in self.model.entries_between(lo, hi, None)]
        max_bytes = None if unlimited else max(sum(sizes[: pick % (len(sizes) + 1)]) + nudge, 0)
        assert self.log.entries(lo, hi, max_bytes) == self.model.entries_between(lo, hi, max_bytes)

    @rule(position=st.integers(0, 1000))
    def offset_after(self, position: int) -> None:
        first, last = self.model.compaction[0], self.model.last_index
        index = first + position % (last - first + 1)
        assert self.log.offset_after(index) == self.model.offset_after(index)

    @rule(pick=st.integers(0, 20), retention_ms=st.sampled_from([0, 1, 99, 150]), nudge=NUDGE)
    def retention_helpers(self, pick: int, retention_ms: int, nudge: int) -> None:
        segments = self.model.segments
        chosen = segments[pick % len(segments)]
        now_ms = (chosen.max_ts if chosen.max_ts > 0 else self.clock) + retention_ms + nudge
        older = [s.base_index for s in self.log.segments_older_than(retention_ms, now_ms)]
        assert older == self.model.segments_older_than(retention_ms, now_ms)
        total = sum(s.size for s in segments)
        retention_bytes = max(total - sum(s.size for s in segments[: pick % (len(segments) + 1)]) + nudge, 0)
        over = [s.base_index for s in self.log.segments_over_size(retention_bytes)]
        assert over == self.model.segments_over_size(retention_bytes)

    # --------------------------------------------------------------------- reads of consumers (synced)

    @invariant()
    def synced_reads_agree_at_every_limit(self) -> None:
        """read() from the first offset and from the middle of batches, with max_bytes and max_offset at batch
        boundaries give or take one; the time index at record timestamps give or take a millisecond. Checked
        once per synced state: reads see synced data only, so it cannot change in between."""
        synced = self.synced
        if synced is None or synced is self.synced_checked:
            return
        self.synced_checked = synced
        batches = [(e, after) for e, after in synced.stored_entries() if e.kind == EntryKind.DATA]
        offsets = {synced.start_offset}
        for entry, after in batches[:1] + batches[len(batches) // 2 :][:1] + batches[-1:]:
            offsets.add(after - count_of(entry) // 2 - 1)  # inside the batch, past its first record if it has two
        for offset in sorted(offsets):
            ahead = [(len(e.payload), after) for e, after in batches if after > offset]
            limits: set[tuple[int, int | None]] = {(1 << 30, None)}
            for count in (1, 2):
                for nudge in (-1, 0, 1):
                    limits.add((max(sum(size for size, _ in ahead[:count]) + nudge, 1), None))
                    if len(ahead) >= count:
                        limits.add((1 << 30, ahead[count - 1][1] + nudge))
            for max_bytes, max_offset in sorted(limits, key=repr):
                got = self.log.read(offset, max_bytes, max_offset=max_offset)
                assert got == synced.read(offset, max_bytes, max_offset), (offset, max_bytes, max_offset)
        stamps = sorted({ts for _, ts, _ in synced.records(self.records)})
        for timestamp_ms in {stamp + nudge for stamp in stamps[:2] + stamps[-2:] for nudge in (-1, 0, 1)}:
            expected = synced.offset_for_timestamp(timestamp_ms, self.records)
            assert self.log.offset_for_timestamp(timestamp_ms) == expected, timestamp_ms

    @invariant()
    def synced_reads_match_the_synced_model(self) -> None:
        synced = self.synced
        if synced is None:
            assert self.log.synced_offsets() == (0, 0)
            with pytest.raises(BeyondLogEndError, match="not been synced"):
                self.log.read(0, 10)
            with pytest.raises(BeyondLogEndError, match="not been synced"):
                self.log.offset_for_timestamp(0)
            return
        start, end = self.log.synced_offsets()
        assert (start, end) == (synced.start_offset, synced.next_offset)
        if end > start:
            got = self.log.read(start, 1 << 30)
            assert got == synced.read(start, 1 << 30, None)  # every batch, byte for byte
            table = decode_batches(got.data)
            timestamps = table.column("timestamp").cast("int64").to_pylist()
            columns = (table.column("offset").to_pylist(), timestamps, table.column("value").to_pylist())
            decoded = list(zip(*columns, strict=True))
            assert decoded == synced.records(self.records)
        if start:
            with pytest.raises(BeforeLogStartError):
                self.log.read(start - 1, 10)
        with pytest.raises(BeyondLogEndError):
            self.log.read(end + 1, 10)

    @rule(
        where=st.sampled_from(["inside", "inside", "inside", "below", "beyond"]),
        position=st.integers(0, 1000),
        pick=st.integers(0, 12),
        nudge=NUDGE,
        unlimited=SOMETIMES,
        limit_pick=st.one_of(st.none(), st.integers(0, 12)),
        limit_nudge=NUDGE,
    )
    def read_anywhere(
        self,
        where: str,
        position: int,
        pick: int,
        nudge: int,
        unlimited: bool,
        limit_pick: int | None,
        limit_nudge: int,
    ) -> None:
        synced = self.synced
        if synced is None:
            return  # checked by synced_reads_match_the_synced_model
        start, end = synced.start_offset, synced.next_offset
        offset = {
            "inside": start + position % (end - start + 1),  # often in the middle of a batch
            "below": start - 1 - position % 5,
            "beyond": end + 1 + position % 5,
        }[where]
        if offset < 0:
            return
        ahead = [
            (len(e.payload), after)
            for e, after in synced.stored_entries()
            if e.kind == EntryKind.DATA and after > offset
        ]
        max_bytes = 1 << 30 if unlimited else max(sum(size for size, _ in ahead[: pick % (len(ahead) + 1)]) + nudge, 1)
        max_offset = None
        if limit_pick is not None:
            ends = [after for _, after in ahead] or [end]
            max_offset = ends[limit_pick % len(ends)] + limit_nudge
        try:
            expected: ReadResult | type[Exception] = synced.read(offset, max_bytes, max_offset)
        except (BeforeLogStartError, BeyondLogEndError) as exc:
            expected = type(exc)
        if isinstance(expected, ReadResult):
            assert self.log.read(offset, max_bytes, max_offset=max_offset) == expected
        else:
            with pytest.raises(expected):
                self.log.read(offset, max_bytes, max_offset=max_offset)

    @rule(pick=st.integers(0, 1000), nudge=NUDGE)
    def time_index(self, pick: int, nudge: int) -> None:
        if self.synced is None:
            return
        stamps = [ts for _, ts, _ in self.synced.records(self.records)] or [self.clock]
        timestamp_ms = stamps[pick % len(stamps)] + nudge
        expected = self.synced.offset_for_timestamp(timestamp_ms, self.records)
        assert self.log.offset_for_timestamp(timestamp_ms) == expected


LogMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_log_matches_its_model = LogMachine.TestCase
