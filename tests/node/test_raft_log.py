"""The Raft core's storage over the LMDB segmented log passes the same conformance suite as MemoryStorage,
and keeps the log's own promises: offsets, retention snapshots, restarts."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from multiraft import raft
from multiraft.node.replicas.raft_log import RaftLogStorage, SnapshotManifest, decode_manifest, encode_manifest
from storage import LogStore, StorageConfig, encode_batch, read_header
from tests.damage import flip_every_copy
from tests.raft.storage_conformance import StorageConformance, entry


class TestSegmentedLogConformance(StorageConformance):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[RaftLogStorage]:
        store = LogStore.open(tmp_path, StorageConfig(segment_bytes=2048))
        yield RaftLogStorage(store.log("t", 0))
        store.close()

    def entry(
        self, index: int, term: int, payload: bytes | None = None, kind: raft.EntryKind = raft.EntryKind.DATA
    ) -> raft.Entry:
        # A data entry of the partition log is a record batch: wrap the suite's payload as one record.
        made = entry(index, term, payload, kind)
        if kind == raft.EntryKind.DATA:
            batch = encode_batch([bytes(made.payload)], timestamps_ms=made.timestamp_ms)
            return raft.Entry(index, term, kind, made.timestamp_ms, batch)
        return made

    def record_applied(self, storage: raft.MutableStorage, index: int, conf_state: raft.ConfState | None) -> None:
        assert isinstance(storage, RaftLogStorage)
        storage.set_applied(index, conf_state)


def _data(index: int, term: int = 1, records: int = 3) -> raft.Entry:
    return raft.Entry(index, term, raft.EntryKind.DATA, 1_000 + index, encode_batch([b"r"] * records, timestamps_ms=5))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogStore]:
    opened = LogStore.open(tmp_path, StorageConfig(segment_bytes=2048))
    yield opened
    opened.close()


def test_raft_sees_batches_as_proposed_while_the_log_gives_them_offsets(store: LogStore) -> None:
    storage = RaftLogStorage(store.log("t", 0))
    proposed = [_data(i) for i in range(1, 6)]
    storage.append(proposed)
    assert [e.payload for e in storage.entries(1, 6, 1 << 30)] == [e.payload for e in proposed]
    assert [read_header(e.payload).base_offset for e in store.log("t", 0).entries(1, 6)] == [0, 3, 6, 9, 12]


def test_a_retention_snapshot_sits_at_the_log_compaction_point_with_the_configuration_in_force(store: LogStore) -> None:
    log = store.log("t", 0)
    storage = RaftLogStorage(log)
    _, bootstrap = raft.bootstrap(raft.ConfState.of((1, 2, 3)))
    storage.apply_snapshot(bootstrap)
    storage.append([_data(i) for i in range(2, 40)])
    storage.set_applied(20, raft.ConfState.of((1, 2, 3), learners=(4,)))
    dropped = log.drop_before(25)
    assert dropped
    snapshot = storage.snapshot_at_compaction_point()
    index, term = log.compaction_point()
    assert (snapshot.meta.index, snapshot.meta.term) == (index, term)
    assert snapshot.meta.conf_state == (
        raft.ConfState.of((1, 2, 3)) if index < 20 else raft.ConfState.of((1, 2, 3), learners=(4,))
    )
    assert decode_manifest(snapshot.data) == SnapshotManifest(log.start_offset())
    assert storage.first_index() == index + 1


def test_a_follower_installing_a_snapshot_resumes_at_the_manifest_offset(store: LogStore) -> None:
    storage = RaftLogStorage(store.log("t", 0))
    manifest = encode_manifest(SnapshotManifest(next_offset=7_000))
    storage.apply_snapshot(raft.Snapshot(raft.SnapshotMeta(100, 3, raft.ConfState.of((1, 2, 3))), manifest))
    storage.append([_data(101, 3)])
    assert read_header(store.log("t", 0).entries(101, 102)[0].payload).base_offset == 7_000


def _config(index: int, change: raft.ConfChange) -> raft.Entry:
    return raft.Entry(index, 1, raft.EntryKind.CONFIG, 0, raft.encode_conf_change(change))


_BEFORE = raft.ConfState.of((1, 2, 3))
_WITH_LEARNER = raft.ConfState.of((1, 2, 3), learners=(4,))
_PROMOTED = raft.ConfState.of((1, 2, 3, 4))


def _log_with_two_changes(storage: RaftLogStorage) -> None:
    """Bootstrap at 1, data 2..11 with a learner added at 4 and promoted at 9, all applied in one round."""
    _, bootstrap = raft.bootstrap(_BEFORE)
    storage.apply_snapshot(bootstrap)
    entries = [_data(i) for i in range(2, 12)]
    entries[4 - 2] = _config(4, raft.ConfChange.add_learner(4))
    entries[9 - 2] = _config(9, raft.ConfChange.add_voter(4))
    storage.append(entries)
    storage.set_hard_state(raft.HardState(1, 0, 11))
    storage.set_applied(11, _PROMOTED)


def test_a_restart_at_any_applied_index_starts_with_the_configuration_of_that_index(tmp_path: Path) -> None:
    with LogStore.open(tmp_path) as store:
        storage = RaftLogStorage(store.log("t", 0))
        _log_with_two_changes(storage)
        storage.create_snapshot(5, _WITH_LEARNER, b"state at 5")
    with LogStore.open(tmp_path) as store:
        storage = RaftLogStorage(store.log("t", 0))
        assert storage.initial_state()[1] == _WITH_LEARNER  # the snapshot's, whatever was applied after it
        assert storage.snapshot().data == b"state at 5"
        for applied, expected in ((0, _WITH_LEARNER), (5, _WITH_LEARNER), (8, _WITH_LEARNER), (9, _PROMOTED)):
            node = raft.RawNode(raft.RaftConfig(id=1), storage, random.Random(0), applied=applied)
            assert node.conf_state == expected, applied
            assert node.status().applied == (applied or 5)


def test_a_restart_at_the_recorded_applied_index_reads_no_entry_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with LogStore.open(tmp_path) as store:
        _log_with_two_changes(RaftLogStorage(store.log("t", 0)))
    with LogStore.open(tmp_path) as store:
        storage = RaftLogStorage(store.log("t", 0))

        def no_reads(*args: object) -> list[raft.Entry]:
            raise AssertionError("the configuration was read from the log")

        monkeypatch.setattr(storage, "entries", no_reads)
        node = raft.RawNode(raft.RaftConfig(id=1), storage, random.Random(0), applied=storage.applied_index())
        assert node.conf_state == _PROMOTED


def test_a_snapshot_inside_a_round_that_changed_the_configuration_gets_the_configuration_of_its_index(
    store: LogStore,
) -> None:
    storage = RaftLogStorage(store.log("t", 0))
    _log_with_two_changes(storage)  # one round applied both changes (at 4 and 9) and ended at 11
    assert [storage.conf_state_at(i) for i in (3, 4, 8, 9, 11)] == [
        _BEFORE, _WITH_LEARNER, _WITH_LEARNER, _PROMOTED, _PROMOTED
    ]  # fmt: skip
    snapshot = storage.snapshot_for_catchup(6, SnapshotManifest(next_offset=0))
    assert snapshot.meta.conf_state == _WITH_LEARNER


def test_committed_entries_reach_the_state_machine_as_the_objects_proposed(store: LogStore) -> None:
    storage = RaftLogStorage(store.log("t", 0))
    _, bootstrap = raft.bootstrap(raft.ConfState.of((1,)))
    storage.apply_snapshot(bootstrap)
    node = raft.RawNode(raft.RaftConfig(id=1), storage, random.Random(0))
    node.campaign()
    proposed = [encode_batch([b"r" * 1000] * 4, timestamps_ms=5) for _ in range(20)]
    applied: list[raft.Entry] = []
    for rounds in range(100):
        if rounds < len(proposed):
            node.propose(proposed[rounds])
        while node.has_ready():  # what the scheduler does with a Ready
            ready = node.ready()
            storage.append(ready.entries)
            if ready.hard_state is not None:
                storage.set_hard_state(ready.hard_state)
            if ready.committed_entries:
                storage.set_applied(ready.committed_entries[-1].index, ready.conf_state)
            applied.extend(e for e in ready.committed_entries if e.kind == raft.EntryKind.DATA)
            node.advance(ready)
    assert [e.payload for e in applied] == proposed
    assert all(e.payload is payload for e, payload in zip(applied, proposed, strict=True))
    assert storage.entries(3, 4, 1 << 30)[0].payload == proposed[1]  # applied: read back from LMDB


def test_recent_entries_are_held_up_to_a_byte_bound_and_older_ones_come_from_the_log(tmp_path: Path) -> None:
    with LogStore.open(tmp_path, StorageConfig(segment_bytes=2048)) as store:
        entry_bytes = len(_data(1).payload)
        storage = RaftLogStorage(store.log("t", 0), recent_bytes=3 * entry_bytes)
        written = [_data(i) for i in range(1, 11)]
        storage.append(written)
        read = storage.entries(1, 11, 1 << 30)
        assert [e.payload for e in read] == [e.payload for e in written]
        assert [got is entry for got, entry in zip(read, written, strict=True)] == [False] * 7 + [True] * 3


# ---------------------------------------------------------------------------------------------- damage


def _flip_payload_byte(store_path: Path, marker: bytes) -> None:
    flip_every_copy(store_path / "log.lmdb" / "data.mdb", marker, at=0, mask=0x20)


def _marked(index: int, term: int = 1) -> raft.Entry:
    batch = encode_batch([b"<marker-%05d>" % index], timestamps_ms=5)
    return raft.Entry(index, term, raft.EntryKind.DATA, 1_000 + index, batch)


def test_a_damaged_entry_is_cut_off_with_everything_after_it_and_the_lost_end_is_recorded(tmp_path: Path) -> None:
    config = StorageConfig(segment_bytes=1 << 20)
    with LogStore.open(tmp_path, config) as store:
        storage = RaftLogStorage(store.log("t", 0))
        storage.append([_marked(i, 1 + i // 10) for i in range(1, 31)])
        storage.set_hard_state(raft.HardState(3, 2, 28))
        storage.set_applied(27)
        store.sync()
    _flip_payload_byte(tmp_path, b"<marker-00021>")
    with LogStore.open(tmp_path, config) as store:
        log = store.log("t", 0)
        assert log.scrub(1, 1 << 30)[2] == 21
        storage = RaftLogStorage(log)
        assert storage.recover_until() == (0, 0)
        assert storage.cut_damaged_suffix(25) == (30, 4)  # reported later, the damage starts at 21
        store.sync()
    with LogStore.open(tmp_path, config) as store:
        storage = RaftLogStorage(store.log("t", 0))
        assert storage.last_index() == 20
        assert storage.applied_index() == 20
        assert storage.recover_until() == (30, 4)
        assert not storage.recovered()
        node = raft.RawNode(
            raft.RaftConfig(id=1), storage, random.Random(0), applied=27, recover_until=storage.recover_until()
        )
        assert node.status().commit == 20 and node.recovering_until == 30
        storage.append([_marked(i, 1 + i // 10) for i in range(21, 31)])
        assert storage.recovered()
        storage.clear_recovery()
        store.sync()
    with LogStore.open(tmp_path, config) as store:
        assert RaftLogStorage(store.log("t", 0)).recover_until() == (0, 0)


def test_a_damaged_entry_at_or_below_the_compaction_point_is_not_cut(store: LogStore) -> None:
    storage = RaftLogStorage(store.log("t", 0))
    storage.append([_data(i) for i in range(1, 11)])
    storage.set_applied(8)
    storage.snapshot_for_catchup(8, SnapshotManifest(0))
    with pytest.raises(raft.IndexCompactedError):
        storage.cut_damaged_suffix(5)
    assert storage.last_index() == 10 and storage.recover_until() == (0, 0)


def test_scrub_walks_the_log_in_slices_of_about_the_budget(store: LogStore) -> None:
    log = store.log("t", 0)
    log.append([_data(i) for i in range(1, 41)])
    size = len(log.entries(1, 2)[0].payload)
    position, slices = 1, 0
    while position <= log.last_index():
        position, checked, damaged = log.scrub(position, 5 * size)
        assert damaged is None and checked > 0
        slices += 1
    assert position == 41 and 6 <= slices <= 10
    assert log.scrub(41, 1 << 20) == (41, 0, None)
