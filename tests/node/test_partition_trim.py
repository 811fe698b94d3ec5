"""DeleteRecords on a partition replica: the TRIM control entry moves the log start offset, drops the segments
wholly below it (a straddling one stays), survives a restart and travels in snapshots; the leader refuses an
offset beyond its high watermark."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from multiraft import raft
from multiraft.errors import InvalidArgumentError, OffsetOutOfRangeError, UnavailableError
from multiraft.node.replicas.control import ControlKind, decode_control, encode_trim
from multiraft.node.replicas.partition import PartitionMachine, PartitionView
from multiraft.node.replicas.raft_group import RaftGroup
from multiraft.node.replicas.raft_log import RaftLogStorage, SnapshotManifest, decode_manifest, encode_manifest
from multiraft.node.threads import ThreadOwner
from storage import LogStore, StorageConfig, encode_batch

T0 = 1_700_000_000_000
RECORDS_PER_ENTRY = 2
DATA_ENTRIES = 4  # offsets 0..7, one segment per entry (each entry is bigger than segment.bytes)


@dataclass
class FakeRaw:
    term: int = 1
    leader_id: int = 1
    role: raft.Role = raft.Role.LEADER
    quiescent: bool = False
    proposed: list[bytes] = field(default_factory=list)  # what its group proposed

    def propose(self, payload: bytes, *, kind: raft.EntryKind, timestamp_ms: int) -> int:
        self.proposed.append(payload)
        return len(self.proposed)


@dataclass
class Answer:
    result: Any = None
    error: BaseException | None = None

    def __call__(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error = result, error


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogStore]:
    opened = LogStore.open(tmp_path, StorageConfig())
    yield opened
    opened.close()


def replica(store: LogStore) -> tuple[PartitionMachine, RaftGroup, FakeRaw]:
    """A replica of t/0 over its stored log, started as a node starts it (state from storage)."""
    plog = store.log("t", 0, segment_bytes=1024)
    storage = RaftLogStorage(plog)
    raw = FakeRaw()
    view = PartitionView("t", 0, 1, plog)
    machine = PartitionMachine("t", 0, 1, plog, ThreadOwner("scheduler"), lambda f: f(), view)
    group = RaftGroup(1, cast(raft.RawNode, raw), storage, machine, role=raft.Role.LEADER)
    machine.start(group)
    return machine, group, raw


def apply_new(machine: PartitionMachine, group: RaftGroup, entries: list[raft.Entry]) -> dict[int, Any]:
    group.storage.append(entries)
    results = machine.apply(group, entries)
    group.storage.set_applied(entries[-1].index)
    return results


def with_records(store: LogStore) -> tuple[PartitionMachine, RaftGroup, FakeRaw]:
    machine, group, raw = replica(store)
    for index in range(1, DATA_ENTRIES + 1):
        batch = encode_batch([b"x" * 800] * RECORDS_PER_ENTRY, timestamps_ms=T0)
        apply_new(machine, group, [raft.Entry(index, 1, raft.EntryKind.DATA, T0, batch)])
    store.sync()
    assert machine.high_watermark == DATA_ENTRIES * RECORDS_PER_ENTRY
    assert len(machine.log.segments()) >= DATA_ENTRIES
    return machine, group, raw


def trim_entry(index: int, offset: int) -> raft.Entry:
    return raft.Entry(index, 1, raft.EntryKind.CONTROL, T0, encode_trim(offset))


def test_the_trim_entry_round_trips_through_the_control_codec() -> None:
    assert decode_control(encode_trim(12345)) == (ControlKind.TRIM, 12345)


def test_applying_a_trim_moves_the_log_start_and_drops_only_the_segments_wholly_below_it(store: LogStore) -> None:
    machine, group, _ = with_records(store)
    results = apply_new(machine, group, [trim_entry(DATA_ENTRIES + 1, 5)])
    assert machine.log_start_offset() == 5
    assert machine.view.log_start_offset == 5
    # offsets 0-1 and 2-3 were whole segments and are gone; 4-5 straddles the offset and stays
    assert machine.log.start_offset() == 4
    assert all(s.base_offset >= 4 for s in machine.log.segments())
    assert results == {}  # not proposed here: nobody waits for an answer
    # the snapshot retention-like drops leave behind says where the log starts, for replicas catching up
    assert decode_manifest(group.storage.snapshot().data).log_start == 5


def test_the_trim_answers_the_new_log_start_to_its_proposer(store: LogStore) -> None:
    machine, group, _ = with_records(store)
    entry = trim_entry(DATA_ENTRIES + 1, 3)
    group.pending[entry.index] = cast(Any, object())
    assert apply_new(machine, group, [entry]) == {entry.index: 3}


def test_a_trim_is_never_undone_by_a_smaller_one_and_survives_a_restart(tmp_path: Path) -> None:
    store = LogStore.open(tmp_path, StorageConfig())
    try:
        machine, group, _ = with_records(store)
        apply_new(machine, group, [trim_entry(DATA_ENTRIES + 1, 5), trim_entry(DATA_ENTRIES + 2, 1)])
        assert machine.log_start_offset() == 5
        store.sync()
    finally:
        store.close()
    reopened = LogStore.open(tmp_path, StorageConfig())
    try:
        machine, _, _ = replica(reopened)
        assert machine.trimmed_to == 5
        assert machine.log_start_offset() == 5
        assert machine.view.log_start_offset == 5
    finally:
        reopened.close()


def test_a_replica_adopts_the_log_start_a_snapshot_carries(store: LogStore) -> None:
    machine, group, _ = with_records(store)
    manifest = SnapshotManifest(machine.high_watermark, log_start=6)
    snapshot = raft.Snapshot(raft.SnapshotMeta(DATA_ENTRIES, 1, raft.ConfState()), encode_manifest(manifest))
    machine.on_snapshot(group, snapshot)
    assert machine.log_start_offset() == 6


def test_the_leader_refuses_an_offset_beyond_its_high_watermark_naming_it(store: LogStore) -> None:
    machine, group, raw = with_records(store)
    answer = Answer()
    machine.delete_records(group, 9, answer)
    assert isinstance(answer.error, OffsetOutOfRangeError)
    assert answer.error.metadata["high_watermark"] == "8"
    assert "beyond the high watermark 8" in str(answer.error)
    assert raw.proposed == []


def test_the_leader_proposes_a_trim_to_the_high_watermark_for_minus_one(store: LogStore) -> None:
    machine, group, raw = with_records(store)
    answer = Answer()
    machine.delete_records(group, -1, answer)
    assert [decode_control(payload) for payload in raw.proposed] == [(ControlKind.TRIM, 8)]
    assert group.pending[1].completion is answer


def test_the_leader_answers_at_once_for_an_offset_already_deleted(store: LogStore) -> None:
    machine, group, raw = with_records(store)
    apply_new(machine, group, [trim_entry(DATA_ENTRIES + 1, 5)])
    answer = Answer()
    machine.delete_records(group, 2, answer)
    assert (answer.result, answer.error) == (5, None)
    assert raw.proposed == []


def test_the_leader_refuses_a_negative_offset_and_waits_until_it_is_current(store: LogStore) -> None:
    machine, group, raw = with_records(store)
    answer = Answer()
    machine.delete_records(group, -2, answer)
    assert isinstance(answer.error, InvalidArgumentError)
    machine.on_role_change(group, raft.SoftState(1, raft.Role.LEADER))  # a new term: not current yet
    machine.delete_records(group, 3, answer)
    assert isinstance(answer.error, UnavailableError)
    assert raw.proposed == []
