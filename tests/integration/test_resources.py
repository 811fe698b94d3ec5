"""Resource exhaustion is refused up front, on a live cluster (issue 13).

- The shared segment pool (``max_segments``): topics are created until the controller refuses one with
  STORAGE_FULL naming what each node lacks; no node stops, and the cluster restarts cleanly (before, the
  CreateTopic that took the last slot failed while it was applied, and again at every replay of the log).
- The disk low-water mark (``min_free_disk_bytes``) on a real, small file system (a tmpfs mounted by the
  test): once free space falls under it, Produce is refused with STORAGE_FULL naming the data directory and
  the free bytes, Fetch still serves what was written, and writes resume once the space is back.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from multiraft.errors import InsufficientStorageError, MultiraftError
from multiraft.tools.launcher import cluster_down, cluster_up, wait_serving
from rpc.client._cluster import ClusterClient
from tests.integration._helpers import FAST, Cluster, fetch_all, produce

MiB = 1 << 20


def _alive(cluster: Cluster) -> None:
    wait_serving(cluster.info, timeout_s=30)  # raises, with the node's log, if any node exited


def _stopped_on_an_error(cluster: Cluster) -> list[str]:
    found = []
    for node in cluster.info.nodes.values():
        text = node.log_path.read_text(errors="replace")
        if "scheduler stopped on an error" in text:
            found.append(f"node {node.node_id}")
    return found


def test_topics_are_refused_once_the_segment_pool_is_full_and_every_node_keeps_running_and_restarts(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # 16 slots per node: the metadata log takes one, 2 are kept for rolls, so 13 single-partition topics of
    # 3 replicas fit on 3 nodes.
    cluster = cluster_factory(max_segments=16, min_free_segments=2)
    created: list[str] = []
    refused: InsufficientStorageError | None = None
    for number in range(30):
        try:
            cluster.create_topic(f"t{number}", 1, 3)
        except InsufficientStorageError as exc:
            refused = exc
            break
        created.append(f"t{number}")

    assert refused is not None, f"{len(created)} topics created, none refused"
    assert 10 <= len(created) <= 13, created
    message = refused.message
    assert "not enough storage for 1 partition(s) x 3 replica(s)" in message
    assert "segments: room for 0 more replica(s)" in message and "min_free_segments" in message
    assert f"t{len(created)}" not in cluster.client.metadata(refresh=True).topics, "a refused topic is not half-made"
    _alive(cluster)
    assert produce(cluster.client, created[-1], 0, [b"still writable"]) == 0

    cluster.restart_all()
    _alive(cluster)
    assert _stopped_on_an_error(cluster) == []
    assert set(created) <= set(cluster.client.metadata(refresh=True).topics)
    assert fetch_all(cluster.client, created[-1], 0) == [(0, b"still writable")]
    with pytest.raises(InsufficientStorageError):
        cluster.create_topic("after-restart", 1, 3)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs mounted for the test (root only), unmounted after it."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the unit tests cover the check with a fake free-space source")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False, timeout=30)


def _produce_outcome(client: ClusterClient, topic: str, value: bytes) -> MultiraftError | None:
    try:
        produce(client, topic, 0, [value], timeout_s=10, max_attempts=1)
    except MultiraftError as exc:
        return exc
    return None


def test_a_node_low_on_disk_refuses_writes_serves_reads_and_resumes_once_space_is_back(small_disk: Path) -> None:
    settings = {**FAST, "min_free_disk_bytes": 16 * MiB}
    info = cluster_up(small_disk / "cluster", 1, settings)
    client = ClusterClient(info.bootstrap, request_timeout_s=30)
    ballast = small_disk / "ballast"
    try:
        cluster = Cluster(info, client)
        cluster.create_topic("orders", 1, 1)
        assert produce(client, "orders", 0, [b"before"]) == 0

        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        with ballast.open("wb") as handle:  # leave 8 MiB: under the 16 MiB low-water mark
            handle.write(b"\0" * max(0, free - 8 * MiB))
            handle.flush()
            os.fsync(handle.fileno())
        refusal: MultiraftError | None = None
        deadline = time.monotonic() + 30
        for attempt in range(300):  # the node checks its free space every second
            refusal = _produce_outcome(client, "orders", b"while low %d" % attempt)
            if isinstance(refusal, InsufficientStorageError) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert isinstance(refusal, InsufficientStorageError), refusal
        data_dir = info.nodes[1].directory
        assert "disk:" in refusal.message and data_dir in refusal.message and "min_free_disk_bytes" in refusal.message
        assert refusal.metadata["resource"] == "disk"
        written = fetch_all(client, "orders", 0)
        assert written[0] == (0, b"before"), "reads go on while writes are refused"

        ballast.unlink()
        outcome: MultiraftError | None = refusal
        deadline = time.monotonic() + 30
        for attempt in range(300):
            outcome = _produce_outcome(client, "orders", b"after %d" % attempt)
            if outcome is None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert outcome is None, f"writes did not resume once space was back: {outcome}"
        assert fetch_all(client, "orders", 0)[-1][1].startswith(b"after")
        wait_serving(info, timeout_s=30)
    finally:
        client.close()
        cluster_down(info.directory)
        ballast.unlink(missing_ok=True)


def test_a_node_that_cannot_store_its_replicas_at_restart_starts_serves_and_they_move_elsewhere(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # Node 4 loses its data and comes back with room for fewer segments than the replicas it is assigned
    # (before, replaying the CreateTopic failed every start). It opens what fits above its reserve, keeps the
    # rest offline and reported, and the controller moves those replicas to nodes with room.
    cluster = cluster_factory(4, replica_replace_after_ms=600_000, rebalance_interval_ms=200)
    cluster.create_topic("t", 20, 3)
    on_4 = sum(4 in p.replicas for p in cluster.describe("t").partitions)
    assert on_4 >= 14, on_4
    cluster.kill(4)
    node = cluster.info.nodes[4]
    subprocess.run(["rm", "-rf", str(Path(node.directory) / "data")], check=True, timeout=30)
    with node.config_path.open("a") as config:
        config.write("max_segments = 16\nmin_free_segments = 2\n")  # the metadata log + 13 replicas fit
    cluster.start(4)

    def settled() -> bool:
        partitions = cluster.describe("t").partitions
        return sum(4 in p.replicas for p in partitions) <= 13 and all(
            len(p.replicas) == 3 and not p.learners and len(p.in_sync_replicas) == 3 for p in partitions
        )

    deadline = time.monotonic() + 120
    in_a_row = 0  # a status answer may miss a leader that is slow to answer: trust three in a row
    for _ in range(1_200):
        in_a_row = in_a_row + 1 if settled() else 0
        if in_a_row == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert in_a_row == 3, [(p.replicas, p.learners, p.in_sync_replicas) for p in cluster.describe("t").partitions]
    assert "cannot store a replica assigned to this node" in node.log_path.read_text(errors="replace")
    cluster.kill(4)
    cluster.start(4)  # and it restarts cleanly
    _alive(cluster)
    assert _stopped_on_an_error(cluster) == []
