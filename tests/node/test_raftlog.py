"""The Raft core's storage over the LMDB segmented log passes the same conformance suite as MemoryStorage,
and keeps the log's own promises: offsets, retention snapshots, restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from multiraft import raft
from multiraft.node.raftlog import RaftLogStorage, SnapshotManifest, decode_manifest, encode_manifest
from storage import LogStore, StorageConfig, encode_batch, read_header
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


def test_restarting_at_a_snapshot_reports_the_configuration_of_that_index(tmp_path: Path) -> None:
    with LogStore.open(tmp_path) as store:
        storage = RaftLogStorage(store.log("t", 0))
        _, bootstrap = raft.bootstrap(raft.ConfState.of((1, 2, 3)))
        storage.apply_snapshot(bootstrap)
        storage.append([_data(i) for i in range(2, 12)])
        storage.create_snapshot(5, raft.ConfState.of((1, 2, 3)), b"state at 5")
        storage.set_applied(8, raft.ConfState.of((1, 2, 3, 4)))
    with LogStore.open(tmp_path) as store:
        storage = RaftLogStorage(store.log("t", 0))
        assert storage.initial_state()[1] == raft.ConfState.of((1, 2, 3, 4))
        storage.restart_at(5)
        assert storage.initial_state()[1] == raft.ConfState.of((1, 2, 3))
        assert storage.snapshot().data == b"state at 5"
