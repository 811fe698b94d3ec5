"""A partition leader's housekeeping: segment rolls and retention by age, also while the group is quiescent.

A quiescent leader's log does not change, so after one check the next time anything can come due (the
active segment reaching segment.ms, the oldest unexpired segment reaching retention.ms) is known: until then
its checks read nothing, and at that time the roll or the drop is proposed as for an active group.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from multiraft import raft
from multiraft.node.replicas.partition import PartitionMachine, PartitionView
from multiraft.node.replicas.raft_group import RaftGroup
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.node.threads import ThreadOwner
from multiraft.node.vocabulary.partitions import RetentionPolicy
from storage import LogStore, SegmentedLog, StorageConfig, encode_batch

SEGMENT_MS = 60_000
T0 = 1_700_000_000_000  # ms: the records' timestamps


@dataclass
class FakeRaw:
    """A leader's Raft core that records what its group proposes."""

    quiescent: bool = True
    term: int = 1
    proposed: list[bytes] = field(default_factory=list)

    def propose(self, payload: bytes, *, kind: raft.EntryKind, timestamp_ms: int) -> int:
        self.proposed.append(payload)
        return len(self.proposed)


class CountingLog:
    """The partition's log, counting how often housekeeping looks at its segments."""

    def __init__(self, log_: SegmentedLog) -> None:
        self._log = log_
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        if name in ("segments", "segments_older_than", "segments_over_size"):
            self.reads += 1
        return getattr(self._log, name)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogStore]:
    opened = LogStore.open(tmp_path, StorageConfig())
    yield opened
    opened.close()


def leader(store: LogStore, retention: RetentionPolicy) -> tuple[PartitionMachine, RaftGroup, FakeRaw, CountingLog]:
    plog = store.log("t", 0, segment_ms=SEGMENT_MS)
    storage = RaftLogStorage(plog)
    batch = encode_batch([b"record"] * 3, timestamps_ms=T0)
    storage.append([raft.Entry(1, 1, raft.EntryKind.DATA, T0, batch)])
    store.sync()
    raw = FakeRaw()
    counting = CountingLog(plog)
    view = PartitionView("t", 0, 1, plog)
    log_ = cast(SegmentedLog, counting)
    machine = PartitionMachine("t", 0, 1, log_, ThreadOwner("scheduler"), lambda f: None, view)
    machine.retention = retention
    group = RaftGroup(1, cast(raft.RawNode, raw), storage, machine, role=raft.Role.LEADER)
    return machine, group, raw, counting


def test_a_quiescent_leader_rolls_its_segment_when_it_reaches_segment_ms_and_reads_nothing_before(
    store: LogStore,
) -> None:
    machine, group, raw, counting = leader(store, RetentionPolicy(-1, -1))
    first_ms = machine.log.segments()[-1].first_timestamp_ms
    assert first_ms > 0
    machine.housekeeping(group, first_ms + 1_000)
    reads = counting.reads
    for second in range(2, 60):
        machine.housekeeping(group, first_ms + second * 1_000)
    assert counting.reads == reads and raw.proposed == []
    machine.housekeeping(group, first_ms + SEGMENT_MS)
    assert len(raw.proposed) == 1  # the roll, on time


def test_an_awake_leader_is_checked_every_time(store: LogStore) -> None:
    machine, group, _, counting = leader(store, RetentionPolicy(-1, -1))
    cast(FakeRaw, group.raw).quiescent = False
    first_ms = machine.log.segments()[-1].first_timestamp_ms
    machine.housekeeping(group, first_ms + 1_000)
    reads = counting.reads
    machine.housekeeping(group, first_ms + 2_000)
    assert counting.reads > reads


def test_a_new_retention_policy_is_checked_at_once_on_a_quiescent_leader(store: LogStore) -> None:
    machine, group, _, counting = leader(store, RetentionPolicy(-1, -1))
    first_ms = machine.log.segments()[-1].first_timestamp_ms
    machine.housekeeping(group, first_ms + 1_000)
    reads = counting.reads
    machine.retention = RetentionPolicy(1_000, -1)
    machine.housekeeping(group, first_ms + 2_000)
    assert counting.reads > reads


def test_a_quiescent_leader_drops_a_segment_when_it_reaches_retention_ms(tmp_path: Path) -> None:
    store = LogStore.open(tmp_path, StorageConfig())
    try:
        plog = store.log("t", 0, segment_bytes=1024, segment_ms=10 * SEGMENT_MS)
        storage = RaftLogStorage(plog)
        for index in range(1, 4):  # each entry fills a segment of its own
            ms = T0 + (index - 1) * 10_000
            batch = encode_batch([b"x" * 1500], timestamps_ms=ms)
            storage.append([raft.Entry(index, 1, raft.EntryKind.DATA, ms, batch)])
        store.sync()
        segments = plog.segments()
        assert len(segments) >= 3 and segments[0].next_offset > segments[0].base_offset
        raw = FakeRaw()
        counting = CountingLog(plog)
        machine = PartitionMachine(
            "t", 0, 1, cast(SegmentedLog, counting), ThreadOwner("scheduler"), lambda f: None,
            PartitionView("t", 0, 1, plog),
        )  # fmt: skip
        machine.retention = RetentionPolicy(30_000, -1)
        group = RaftGroup(1, cast(raft.RawNode, raw), storage, machine, role=raft.Role.LEADER)
        expires_ms = segments[0].max_timestamp_ms + 30_000
        machine.housekeeping(group, expires_ms - 10_000)
        reads = counting.reads
        for ms in range(expires_ms - 9_000, expires_ms, 1_000):
            machine.housekeeping(group, ms)
        assert counting.reads == reads and raw.proposed == []
        machine.housekeeping(group, expires_ms)
        assert len(raw.proposed) == 1  # the drop, on time
    finally:
        store.close()
