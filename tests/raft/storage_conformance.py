"""Conformance suite for :class:`multiraft.raft.MutableStorage` implementations.

Reuse it against another implementation by subclassing and providing a ``storage`` fixture that returns a fresh,
empty storage::

    from tests.raft.storage_conformance import StorageConformance

    class TestLmdbRaftStorage(StorageConformance):
        @pytest.fixture
        def storage(self, tmp_path):
            return LmdbRaftStorage.open(tmp_path / "group-1")

The suite covers the read contract the core relies on (indexes, terms, size limits, typed errors) and the
write contract the application follows while handling Ready (append truncates a suffix, snapshots replace the
log, compaction keeps the snapshot's term readable). Payloads may come back as ``bytes`` or ``memoryview``.
"""

from __future__ import annotations

import random

import pytest

from multiraft.raft import (
    CompactionBeyondSnapshotError,
    ConfChange,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    IndexCompactedError,
    IndexUnavailableError,
    MutableStorage,
    RaftConfig,
    RawNode,
    Snapshot,
    SnapshotMeta,
    SnapshotOutOfDateError,
    bootstrap,
    encode_conf_change,
)

BIG = 1 << 40


def entry(index: int, term: int, payload: bytes | None = None, kind: EntryKind = EntryKind.DATA) -> Entry:
    return Entry(index, term, kind, 1_000 + index, payload if payload is not None else f"p{index}".encode())


def as_tuples(entries: list[Entry]) -> list[tuple[int, int, int, int, bytes]]:
    return [(e.index, e.term, int(e.kind), e.timestamp_ms, bytes(e.payload)) for e in entries]


class StorageConformance:
    """The behaviour every storage behind a RawNode must have. Subclasses provide the ``storage`` fixture."""

    @pytest.fixture
    def storage(self) -> MutableStorage:
        raise NotImplementedError("provide a fixture returning a fresh, empty storage")

    def entry(self, index: int, term: int, payload: bytes | None = None, kind: EntryKind = EntryKind.DATA) -> Entry:
        """An entry as this storage accepts it; override when DATA payloads must have a format of their own."""
        return entry(index, term, payload, kind)

    def record_applied(self, storage: MutableStorage, index: int, conf_state: ConfState | None) -> None:
        """What the application records with its applied index, for a storage that keeps it (default: nothing).

        ``conf_state`` is the Ready's: the configuration after its committed entries, None if they changed none.
        """

    def fill(self, storage: MutableStorage, last: int, term: int = 1) -> list[Entry]:
        entries = [self.entry(i, term) for i in range(storage.last_index() + 1, last + 1)]
        storage.append(entries)
        return entries

    # --- reads of an empty storage -----------------------------------------------------------------------

    def test_an_empty_storage_holds_nothing_after_index_zero(self, storage: MutableStorage) -> None:
        assert storage.first_index() == 1
        assert storage.last_index() == 0
        assert storage.term(0) == 0
        assert storage.initial_state() == (HardState(), ConfState())
        assert storage.snapshot().meta.index == 0
        assert storage.entries(1, 1, BIG) == []

    # --- appends -----------------------------------------------------------------------------------------

    def test_recently_appended_entries_come_back_as_the_objects_appended(self, storage: MutableStorage) -> None:
        # A committed entry reaches the state machine as the object proposed: no payload copy on the way.
        written = [self.entry(i, 1, b"x" * 100) for i in range(1, 6)]
        storage.append(written)
        assert all(got is entry for got, entry in zip(storage.entries(1, 6, BIG), written, strict=True))
        replaced = [self.entry(4, 2, b"y" * 100), self.entry(5, 2, b"z" * 100)]
        storage.append(replaced)
        assert all(got is entry for got, entry in zip(storage.entries(4, 6, BIG), replaced, strict=True))
        assert as_tuples(storage.entries(3, 6, BIG)) == as_tuples([written[2], *replaced])

    def test_appended_entries_read_back_with_index_term_kind_timestamp_and_payload(
        self, storage: MutableStorage
    ) -> None:
        written = [
            self.entry(1, 1, b""),
            self.entry(2, 1, b"x" * 1000, EntryKind.CONFIG),
            self.entry(3, 2, b"y", EntryKind.NOOP),
            self.entry(4, 2, b"z", EntryKind.CONTROL),
        ]
        storage.append(written)
        assert (storage.first_index(), storage.last_index()) == (1, 4)
        assert as_tuples(storage.entries(1, 5, BIG)) == as_tuples(written)
        assert as_tuples(storage.entries(2, 4, BIG)) == as_tuples(written[1:3])
        assert [storage.term(i) for i in range(5)] == [0, 1, 1, 2, 2]

    def test_append_overwrites_the_stored_suffix_from_its_first_index(self, storage: MutableStorage) -> None:
        self.fill(storage, 10, term=1)
        storage.append([self.entry(6, 2, b"new6"), self.entry(7, 2, b"new7")])
        assert storage.last_index() == 7
        assert [storage.term(i) for i in range(1, 8)] == [1, 1, 1, 1, 1, 2, 2]
        assert as_tuples(storage.entries(7, 8, BIG)) == as_tuples([self.entry(7, 2, b"new7")])
        storage.append([self.entry(8, 2)])
        assert storage.last_index() == 8

    def test_append_that_would_leave_a_gap_is_refused(self, storage: MutableStorage) -> None:
        self.fill(storage, 3)
        with pytest.raises(IndexUnavailableError):
            storage.append([self.entry(5, 1)])
        assert storage.last_index() == 3

    def test_entries_respect_max_size_but_always_return_at_least_one(self, storage: MutableStorage) -> None:
        storage.append([self.entry(i, 1, b"x" * 10) for i in range(1, 11)])
        size = len(self.entry(1, 1, b"x" * 10).payload)  # whatever form the storage needs for a payload
        assert len(storage.entries(1, 11, 3 * size + size // 2)) == 3
        assert len(storage.entries(1, 11, 3 * size)) == 3
        assert len(storage.entries(1, 11, 3 * size - 1)) == 2
        assert len(storage.entries(1, 11, 0)) == 1
        assert len(storage.entries(4, 11, BIG)) == 7

    def test_reading_outside_the_log_raises_typed_errors(self, storage: MutableStorage) -> None:
        self.fill(storage, 5)
        with pytest.raises(IndexUnavailableError):
            storage.entries(4, 7, BIG)
        with pytest.raises(IndexUnavailableError):
            storage.term(6)
        storage.create_snapshot(3, ConfState.of((1,)), b"s")
        storage.compact(3)
        with pytest.raises(IndexCompactedError):
            storage.entries(3, 5, BIG)
        with pytest.raises(IndexCompactedError):
            storage.term(2)

    # --- hard state --------------------------------------------------------------------------------------

    def test_the_hard_state_is_saved(self, storage: MutableStorage) -> None:
        self.fill(storage, 4)
        storage.set_hard_state(HardState(term=3, vote=2, commit=4))
        assert storage.initial_state()[0] == HardState(term=3, vote=2, commit=4)

    # --- snapshots and compaction ------------------------------------------------------------------------

    def test_create_snapshot_records_the_applied_state_and_compact_drops_entries_up_to_it(
        self, storage: MutableStorage
    ) -> None:
        self.fill(storage, 5, term=1)
        self.fill(storage, 10, term=2)
        conf = ConfState.of((1, 2, 3), learners=(4,))
        snapshot = storage.create_snapshot(7, conf, b"state up to 7")
        assert snapshot.meta == SnapshotMeta(7, 2, conf)
        assert storage.snapshot().meta == snapshot.meta and bytes(storage.snapshot().data) == b"state up to 7"
        assert storage.first_index() == 1  # entries stay until compacted
        storage.compact(7)
        assert (storage.first_index(), storage.last_index()) == (8, 10)
        assert storage.term(7) == 2
        assert as_tuples(storage.entries(8, 11, BIG)) == as_tuples([self.entry(i, 2) for i in range(8, 11)])
        assert storage.initial_state()[1] == conf

    def test_a_snapshot_that_is_not_newer_is_refused(self, storage: MutableStorage) -> None:
        self.fill(storage, 10)
        storage.create_snapshot(5, ConfState.of((1,)), b"")
        with pytest.raises(SnapshotOutOfDateError):
            storage.create_snapshot(5, ConfState.of((1,)), b"")
        with pytest.raises(SnapshotOutOfDateError):
            storage.apply_snapshot(Snapshot(SnapshotMeta(4, 1, ConfState.of((1,))), b""))

    def test_compacting_past_the_snapshot_or_the_log_is_refused_with_typed_errors(
        self, storage: MutableStorage
    ) -> None:
        self.fill(storage, 10)
        storage.create_snapshot(5, ConfState.of((1,)), b"")
        with pytest.raises(CompactionBeyondSnapshotError):
            storage.compact(7)
        with pytest.raises(IndexUnavailableError):
            storage.compact(11)
        assert (storage.first_index(), storage.last_index()) == (1, 10)
        storage.compact(5)
        assert storage.first_index() == 6

    def test_compacting_twice_to_the_same_index_raises_compacted_error(self, storage: MutableStorage) -> None:
        self.fill(storage, 10)
        storage.create_snapshot(6, ConfState.of((1,)), b"")
        storage.compact(4)
        with pytest.raises(IndexCompactedError):
            storage.compact(4)
        storage.compact(6)

    def test_applying_a_snapshot_replaces_the_whole_log(self, storage: MutableStorage) -> None:
        self.fill(storage, 10)
        conf = ConfState.of((1, 2, 3))
        snapshot = Snapshot(SnapshotMeta(20, 4, conf), b"from the leader")
        storage.apply_snapshot(snapshot)
        assert (storage.first_index(), storage.last_index()) == (21, 20)
        assert storage.term(20) == 4
        assert storage.snapshot().meta == snapshot.meta
        assert storage.initial_state()[1] == conf
        storage.append([self.entry(21, 4)])
        assert storage.last_index() == 21

    def test_append_skips_entries_already_covered_by_the_snapshot(self, storage: MutableStorage) -> None:
        storage.apply_snapshot(Snapshot(SnapshotMeta(5, 2, ConfState.of((1,))), b""))
        storage.append([self.entry(4, 2), self.entry(5, 2), self.entry(6, 2)])
        assert (storage.first_index(), storage.last_index()) == (6, 6)

    def test_a_bootstrapped_member_starts_from_the_bootstrap_snapshot(self, storage: MutableStorage) -> None:
        conf = ConfState.of((1, 2, 3))
        hard_state, snapshot = bootstrap(conf)
        storage.apply_snapshot(snapshot)
        storage.set_hard_state(hard_state)
        assert storage.initial_state() == (HardState(1, 0, 1), conf)
        assert (storage.first_index(), storage.last_index(), storage.term(1)) == (2, 1, 1)

    # --- configuration on restart ------------------------------------------------------------------------

    def test_storage_reports_the_snapshot_configuration_and_a_restart_folds_the_changes_applied_after_it(
        self, storage: MutableStorage
    ) -> None:
        before = ConfState.of((1, 2, 3))
        with_learner = ConfState.of((1, 2, 3), learners=(4,))
        promoted = ConfState.of((1, 2, 3, 4))
        _, snapshot = bootstrap(before)
        storage.apply_snapshot(snapshot)
        add_learner = encode_conf_change(ConfChange.add_learner(4))
        add_voter = encode_conf_change(ConfChange.add_voter(4))
        storage.append(
            [
                self.entry(2, 1),
                self.entry(3, 1, add_learner, EntryKind.CONFIG),
                self.entry(4, 1),
                self.entry(5, 1),
                self.entry(6, 1, add_voter, EntryKind.CONFIG),
                self.entry(7, 1),
            ]
        )
        storage.set_hard_state(HardState(1, 0, 7))
        self.record_applied(storage, 5, with_learner)  # the application applied 2..5, then 6..7
        self.record_applied(storage, 7, promoted)
        expected = {1: before, 2: before, 3: with_learner, 4: with_learner, 5: with_learner, 6: promoted, 7: promoted}

        def restarted_at(applied: int) -> ConfState:
            return RawNode(RaftConfig(id=1), storage, random.Random(0), applied=applied).conf_state

        assert storage.initial_state() == (HardState(1, 0, 7), before)
        for applied in range(1, 8):
            checkpoint, _ = storage.conf_checkpoint(applied)
            assert 1 <= checkpoint <= applied
            assert restarted_at(applied) == expected[applied], applied
        assert restarted_at(0) == before  # 0: the snapshot index
        storage.create_snapshot(4, with_learner, b"state at 4")
        storage.compact(4)
        assert storage.initial_state()[1] == with_learner
        assert storage.conf_checkpoint(4) == (4, with_learner)
        assert restarted_at(0) == with_learner
        assert restarted_at(5) == with_learner
        assert restarted_at(7) == promoted
