"""The seeded Raft simulation of ``tests/raft`` over the LMDB adapter: every node keeps its log in real LMDB files.

Each node's :class:`RaftLogStorage` sits on its own :class:`LogStore` (its own directory, so one node's sync
never makes another's writes durable). A Ready with ``must_sync`` is followed by ``LogStore.sync()``; a crash
rolls back what was not synced and reopens the store, so the node restarts from exactly what LMDB made durable.
Safety is checked after every step and liveness at the end, as for the in-memory runs.

Replay one seed: ``RAFT_SIM_SEED=17 .venv/bin/python -m pytest tests/node/test_raft_log_simulation.py -k replay -s``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

from multiraft import raft
from multiraft.node.replicas.raft_log import RaftLogStorage
from storage import LogStore, StorageConfig, encode_batch
from tests.raft.harness import UnsyncedWriteCounter
from tests.raft.simulation import Simulation, replay_hint

LMDB_SEEDS = 300
_CONFIG = StorageConfig(segment_bytes=1024)  # small segments: compaction drops whole segments often

_exercised: Counter[str] = Counter()
_seconds = [0.0]


class _CountingStorage(UnsyncedWriteCounter, RaftLogStorage):
    """The adapter, counting the writes not synced yet (what a crash loses)."""


class LmdbDisk:
    """One node's LogStore in ``directory``; a crash discards the unsynced transaction and reopens."""

    def __init__(self, directory: Path, conf_state: raft.ConfState | None) -> None:
        self.directory = directory
        self.store = LogStore.open(directory, _CONFIG)
        self.storage: _CountingStorage = _CountingStorage(self.store.log("sim", 0))
        if conf_state is not None:
            hard_state, snapshot = raft.bootstrap(conf_state)
            self.storage.apply_snapshot(snapshot)
            self.storage.set_hard_state(hard_state)
        self.sync()

    def sync(self) -> None:
        self.store.sync()
        self.storage.unsynced_writes = 0

    def crash(self) -> int:
        lost = self.storage.unsynced_writes
        self.store.rollback()
        self.store.close()
        self.store = LogStore.open(self.directory, _CONFIG)
        self.storage = _CountingStorage(self.store.log("sim", 0))
        return lost

    def damage(self, keep: int) -> tuple[int, int]:
        """A damaged disk: the node's repair cuts the log after ``keep`` (as ``Store.repair_replica`` does,
        recording where it ended) and syncs; returns that record."""
        self.crash()
        record = self.storage.cut_damaged_suffix(keep + 1)
        assert self.storage.recover_until() == record
        self.sync()
        return record

    def close(self) -> None:
        self.store.close()


def as_record_batch(payload: bytes) -> bytes:
    """A partition entry is a record batch: the client payload becomes one record."""
    return encode_batch([payload], timestamps_ms=0)


def run_lmdb_seed(seed: int, root: Path) -> Counter[str]:
    disks = count()

    def new_disk(node_id: int, conf_state: raft.ConfState | None) -> LmdbDisk:
        return LmdbDisk(root / f"seed-{seed}-node-{node_id}-{next(disks)}", conf_state)

    sim = Simulation(seed, disk=new_disk, payload=as_record_batch)
    try:
        return sim.run().stats
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} over LMDB ({sim.params}): {exc}\n{_replay(seed)}") from exc
    finally:
        sim.close()


def _replay(seed: int) -> str:
    return replay_hint(seed).replace("tests/raft/test_simulation.py::test_replay_one_seed", __file__ + " -k replay")


@pytest.fixture
def memory_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory in tmpfs when there is one: the simulation's crash is a rollback and reopen, never a lost
    page cache, so fsync buys it nothing and would make these runs wait on the disk."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="raftlog-sim-", dir="/dev/shm"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("seed", range(LMDB_SEEDS), ids=lambda seed: f"seed-{seed}")
def test_random_schedule_over_lmdb_is_safe_and_live(seed: int, memory_dir: Path) -> None:
    started = time.perf_counter()
    _exercised.update(run_lmdb_seed(seed, memory_dir))
    _seconds[0] += time.perf_counter() - started


def test_the_lmdb_schedules_crash_with_unsynced_writes_and_compact_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    if _exercised["schedules"] < LMDB_SEEDS:
        pytest.skip("needs the full seeded run of this module")
    with capsys.disabled():
        print(f"\n[raft simulation over LMDB] {LMDB_SEEDS} schedules: {_seconds[0]:.1f} s")
    for what in (
        "crashes losing unsynced writes",
        "crashes losing an unsynced ready",
        "snapshots installed",
        "crashes losing committed entries",
    ):
        assert _exercised[what] > 5, f"{what}: {_exercised[what]}"
    assert _exercised["acknowledged writes"] > 50 * LMDB_SEEDS


def test_replay_one_seed_over_lmdb(tmp_path: Path) -> None:
    seed = os.environ.get("RAFT_SIM_SEED")
    if seed is None:
        pytest.skip("set RAFT_SIM_SEED=<seed> to replay one schedule")
    print(f"seed {seed}: {run_lmdb_seed(int(seed), tmp_path)}")


def test_a_crash_over_lmdb_loses_what_was_not_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A core that never asks for a sync loses acknowledged entries and votes in crashes; the run must notice.
    original = raft.RawNode.ready

    def never_sync(self: raft.RawNode) -> raft.Ready:
        ready = dataclasses.replace(original(self), must_sync=False)
        self._outstanding = ready  # advance() wants the Ready it handed out
        return ready

    monkeypatch.setattr(raft.RawNode, "ready", never_sync)
    failing = []
    for seed in range(30):
        try:
            run_lmdb_seed(seed, tmp_path)
        except AssertionError:
            failing.append(seed)
            break
    assert failing, "no seed in 0..29 exposes a core that never syncs (seeds 6, 11 and 22 did)"
