"""The scrubber re-reads every replica's stored entries within its byte budget and hands damage to the repair."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from multiraft import raft
from multiraft.node.replicas.raft_log import RaftLogStorage, SnapshotManifest
from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from multiraft.node.scheduler.scrubber import MAX_GROUPS_PER_SLICE, SLICE_S, Scrubber
from multiraft.node.threads import ThreadOwner
from storage import LogStore, StorageConfig, encode_batch
from tests.damage import flip_every_copy


@dataclass
class FakeScheduler:
    """What the scrubber uses of the scheduler: its groups, its owner thread, and the damage report."""

    groups: dict[int, RaftGroup] = field(default_factory=dict)
    owner: ThreadOwner = field(default_factory=lambda: ThreadOwner("scheduler"))
    reported: list[tuple[int, int | None]] = field(default_factory=list)

    def report_damage(self, group: RaftGroup, exc: Any) -> bool:
        self.reported.append((group.group_id, exc.index))
        return True


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogStore]:
    opened = LogStore.open(tmp_path, StorageConfig(segment_bytes=64 << 10))
    yield opened
    opened.close()


def _group(store: LogStore, group_id: int, entries: int) -> RaftGroup:
    storage = RaftLogStorage(store.log("t", group_id))
    batches = [encode_batch([b"<g%d-e%04d>" % (group_id, i)] * 20, timestamps_ms=5) for i in range(1, entries + 1)]
    storage.append([raft.Entry(i, 1, raft.EntryKind.DATA, 1_000, batch) for i, batch in enumerate(batches, 1)])
    return RaftGroup(group_id, cast(raft.RawNode, None), storage, cast(Any, None))


def _scrubber(scheduler: FakeScheduler, bytes_per_s: int) -> Scrubber:
    scheduler.owner.bind()
    return Scrubber(cast(Scheduler, scheduler), bytes_per_s)


def test_each_slice_checks_about_its_share_of_the_budget_and_a_pass_covers_every_replica(store: LogStore) -> None:
    scheduler = FakeScheduler({1: _group(store, 1, 50), 2: _group(store, 2, 30)})
    store.sync()
    value = len(store.log("t", 1).entries(1, 2)[0].payload) + 37
    scrubber = _scrubber(scheduler, bytes_per_s=int(10 * value / SLICE_S))  # about 10 entries a slice
    slices = 0
    while scrubber.stats.passes < 1 and slices < 100:
        before = scrubber.stats.bytes
        scrubber.run_slice()
        assert scrubber.stats.bytes - before <= 11 * value
        slices += 1
    assert scrubber.stats.entries == 80 and 8 <= slices <= 12
    assert scheduler.reported == [] and scrubber.stats.corruptions == 0


def test_a_slice_visits_a_bounded_number_of_small_replicas_and_later_slices_cover_the_rest(store: LogStore) -> None:
    replicas = 2 * MAX_GROUPS_PER_SLICE + 3
    scheduler = FakeScheduler({g: _group(store, g, 2) for g in range(1, replicas + 1)})
    store.sync()
    scrubber = _scrubber(scheduler, bytes_per_s=1 << 30)  # bytes never run out: only the visits bound a slice
    scrubber.run_slice()
    assert scrubber.stats.entries == 2 * MAX_GROUPS_PER_SLICE and scrubber.stats.passes == 0
    slices = 1
    while scrubber.stats.passes < 1 and slices < 10:
        scrubber.run_slice()
        slices += 1
    assert slices == 3 and 2 * replicas <= scrubber.stats.entries <= 3 * 2 * MAX_GROUPS_PER_SLICE


def test_a_damaged_entry_is_reported_for_repair_and_counted(store: LogStore, tmp_path: Path) -> None:
    scheduler = FakeScheduler({1: _group(store, 1, 40)})
    store.sync()
    data_file = tmp_path / "log.lmdb" / "data.mdb"
    flip_every_copy(data_file, b"<g1-e0031>")  # the running store maps the file: its next read sees this
    scrubber = _scrubber(scheduler, bytes_per_s=1 << 30)
    scrubber.run_slice()
    assert scheduler.reported == [(1, 31)]
    assert (scrubber.stats.corruptions, scrubber.stats.repairs, scrubber.stats.unrepairable) == (1, 1, 0)


def test_damage_below_the_compaction_point_is_counted_as_unrepairable(store: LogStore, tmp_path: Path) -> None:
    group = _group(store, 1, 40)
    group.storage.set_applied(35)
    group.storage.snapshot_for_catchup(35, SnapshotManifest(0))  # Raft compacted to 35; the segments stay
    scheduler = FakeScheduler({1: group})
    store.sync()
    data_file = tmp_path / "log.lmdb" / "data.mdb"
    flip_every_copy(data_file, b"<g1-e0031>")
    scrubber = _scrubber(scheduler, bytes_per_s=1 << 30)
    scrubber.run_slice()
    assert scheduler.reported == []
    assert (scrubber.stats.corruptions, scrubber.stats.unrepairable) == (1, 1)
