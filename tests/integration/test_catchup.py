"""A replica that lost its data catches up by copying sealed segment files, then replays the tail."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from multiraft.tools.launcher import cluster_down, stop_node
from storage import LogStore, StorageConfig
from tests.integration._helpers import Cluster, produce

pytestmark = pytest.mark.integration

SEGMENT_BYTES = 256 * 1024
RECORD = b"x" * 1000


def _wait_for_line(path: Path, start: int, pattern: str, timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        with path.open("rb") as handle:
            handle.seek(start)
            text = handle.read().decode(errors="replace")
        found = re.search(pattern, text)
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} in {path} after {timeout_s}s:\n{text[-3000:]}")


def _log_bytes(data_dir: Path, topic: str) -> tuple[bytes, list[tuple[int, int]]]:
    """Every record batch of the partition as stored, and its segments' index ranges."""
    with LogStore.open(data_dir, StorageConfig()) as store:
        plog = store.log(topic, 0, create=False)
        parts, offset = [], plog.start_offset()
        for _ in range(100_000):
            if offset >= plog.next_offset():
                break
            result = plog.read(offset, 4 << 20)
            parts.append(result.data)
            offset = result.next_offset
        segments = [(s.base_index, s.last_index) for s in plog.segments() if s.sealed]
        return b"".join(parts), segments


def _setup(
    cluster_factory: Callable[..., Cluster], monkeypatch: pytest.MonkeyPatch, bandwidth_mb_s: float, **env: str
) -> tuple[Cluster, int, int]:
    """A partition with about ten sealed segments; one follower loses its data and restarts with ``env``.
    Returns the cluster, the wiped node and the node left stopped (the old leader)."""
    cluster = cluster_factory(
        3, replica_replace_after_ms=3_600_000, move_bandwidth_mb_s=bandwidth_mb_s, max_concurrent_moves=1
    )
    cluster.create_topic("cu", partitions=1, replication_factor=3, segment_bytes=str(SEGMENT_BYTES))
    for sequence in range(60):  # ~2.4 MB in 40 KB batches
        produce(cluster.client, "cu", 0, [RECORD + b"%d:%d" % (sequence, r) for r in range(40)])
    leader = cluster.leader("cu", 0)
    preferred = cluster.describe("cu").partitions[0].preferred_leader
    # Not node 1 (a fresh node 1 starts the first controller election) and not one that campaigns at once.
    victim = next(n for n in (3, 2) if n not in (leader, preferred))
    other = next(n for n in (1, 2, 3) if n not in (victim, leader))
    info = cluster.info
    # A running leader remembers how far the victim had got (Raft assumes disks keep what they acknowledged)
    # and would ignore its rejections: restart without it, so whoever leads has fresh progress.
    for node in (victim, leader, other):
        stop_node(info, node)
    shutil.rmtree(Path(info.nodes[victim].directory) / "data")
    cluster.start(other, wait=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cluster.start(victim, wait=False)
    for name in env:
        monkeypatch.delenv(name)
    return cluster, victim, leader


def _finish_and_compare(cluster: Cluster, victim: int, leader: int) -> None:
    """Restart the old leader, replicate a tail, and check that every replica stores the same bytes."""
    cluster.start(leader)
    for sequence in range(60, 70):
        produce(cluster.client, "cu", 0, [RECORD + b"%d:%d" % (sequence, r) for r in range(40)])
    deadline = time.monotonic() + 30
    lag: dict[int, int] = {}
    while time.monotonic() < deadline:
        lag = dict(cluster.describe("cu").partitions[0].replica_lag)
        if len(lag) == 2 and all(v == 0 for v in lag.values()):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"replicas did not catch up: {lag}")
    cluster_down(cluster.info.directory)
    stored = {n: _log_bytes(Path(cluster.info.nodes[n].directory) / "data", "cu") for n in (1, 2, 3)}
    assert len(stored[victim][0]) > 70 * 40 * 1000
    assert all(stored[n] == stored[victim] for n in (1, 2, 3)), {n: s[1] for n, s in stored.items()}


def _fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


def test_a_wiped_replica_copies_segments_with_retries_then_replays_the_tail(
    cluster_factory: Callable[..., Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, victim, leader = _setup(
        cluster_factory,
        monkeypatch,
        20.0,
        MULTIRAFT_DEBUG_CATCHUP_CORRUPT_CHUNKS="2",  # the first two chunks arrive damaged
        MULTIRAFT_DEBUG_CATCHUP_DROP_EVERY="4",  # every 4th fetch loses its connection mid-request
    )
    installed = _wait_for_line(cluster.info.nodes[victim].log_path, 0, r"catch-up installed.*", timeout_s=60)
    fields = _fields(installed.group(0))
    assert int(fields["bytes_copied"]) > 4 * SEGMENT_BYTES
    assert int(fields["chunk_retries"]) >= 2  # the corrupt chunks were fetched again
    assert int(fields["reconnects"]) >= 1  # and the dropped fetches retried
    _finish_and_compare(cluster, victim, leader)


def test_a_copy_killed_midway_resumes_after_restart(
    cluster_factory: Callable[..., Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0.5 MB/s: the copy takes about 4.4 s, so a slow test host still kills it midway.
    cluster, victim, leader = _setup(cluster_factory, monkeypatch, 0.5)
    log_path = cluster.info.nodes[victim].log_path
    _wait_for_line(log_path, 0, r"segment copied.*done=1 ", timeout_s=60)
    cluster.kill(victim)
    restart_at = log_path.stat().st_size
    cluster.start(victim, wait=False)
    _wait_for_line(log_path, restart_at, r"resuming a catch-up copy", timeout_s=30)
    installed = _wait_for_line(log_path, restart_at, r"catch-up installed.*", timeout_s=60)
    fields = _fields(installed.group(0))
    assert int(fields["resumed_bytes"]) >= 200_000  # the segments copied before the kill were kept
    _finish_and_compare(cluster, victim, leader)
