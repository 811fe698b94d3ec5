"""A replica whose stored data fails its checksum repairs itself from a healthy peer, without an operator.

NATS JetStream lost acknowledged writes when a follower's data file was damaged (Jepsen, 2025). Here a byte
inside a committed record of a stopped follower's LMDB file is flipped; the node restarts, finds the damage
(the scrubber, or the first read of the entry), cuts its log before the damaged entry, and gets the entries
back from the leader, while it votes for no log lacking them. Every acknowledged record is then read back
exactly once, and every replica is byte-identical.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from multiraft.node.scheduler.term_guard import TermGuard
from multiraft.node.threads import ThreadOwner
from multiraft.tools.launcher import cluster_down, load_cluster
from rpc.proto import multiraft_pb2 as pb
from storage import LogStore, encode_batch
from storage.check import check_store
from tests.damage import flip_every_copy
from tests.integration._helpers import Cluster, assert_replicas_identical, fetch_all, wait_settled

pytestmark = pytest.mark.integration

TOPIC = "ledger"
BATCHES = 60


def _value(batch: int, record: int) -> bytes:
    return b"<acked-%04d-%02d>" % (batch, record) + b"." * 200


def _flip_inside(data_file: Path, marker: bytes) -> int:
    """Flip one bit inside every copy of ``marker`` in the file; returns how many copies."""
    return flip_every_copy(data_file, marker, at=len(marker) // 2, mask=0x04)


def _wait_for_log_line(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        if text in path.read_text(errors="replace"):
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} after {timeout_s}s")


def _write_acknowledged(cluster: Cluster, first: int, count: int, producer_id: int) -> list[bytes]:
    """Batches of 4 records, from an idempotent producer (``producer_id`` >= 0) or a plain one."""
    acked: list[bytes] = []
    for batch in range(first, first + count):
        values = [_value(batch, r) for r in range(4)]
        encoded = encode_batch(
            values,
            timestamps_ms=int(time.time() * 1000),
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=4 * batch if producer_id >= 0 else -1,
        )
        request = pb.ProduceRequest(topic=TOPIC, partition=0, batch=encoded)
        cluster.client.call_leader(
            TOPIC, 0, lambda stub, timeout, request=request: stub.Produce(request, timeout=timeout), timeout_s=30
        )
        acked += values
    return acked


@pytest.mark.parametrize("detected_by", ["scrubber", "read"])
def test_a_follower_with_a_flipped_bit_in_committed_data_repairs_itself_from_the_leader(
    cluster_factory: object, detected_by: str
) -> None:
    # "scrubber": an idempotent producer's state is checkpointed on every replica, so a restart reads none of
    # the entries before the checkpoint and only the scrubber finds the damage. "read": no scrubber and plain
    # batches; the restarted replica reads every entry as it rebuilds its state and repairs instead of failing.
    scrubbing = detected_by == "scrubber"
    cluster: Cluster = cluster_factory(scrub_bytes_per_s=64 << 20 if scrubbing else 0)  # type: ignore[operator]
    cluster.create_topic(TOPIC, 1, 3)
    producer_id = -1
    if scrubbing:
        stub = cluster.client.log_stub(cluster.info.nodes[1].client_address)
        producer_id = int(stub.InitProducer(pb.InitProducerRequest(), timeout=30).producer_id)
    acked = _write_acknowledged(cluster, 0, BATCHES, producer_id)
    wait_settled(cluster, TOPIC, 60, preferred_leaders=False)
    time.sleep(1.0)  # a few housekeeping rounds (200 ms): every replica checkpoints the producers' state...
    acked += _write_acknowledged(cluster, BATCHES, 1, producer_id)  # ...which the next write's sync makes durable
    wait_settled(cluster, TOPIC, 60)  # with the preferred leader leading: no hand-back is due later
    leader = cluster.leader(TOPIC, 0)
    follower = next(n for n in sorted(cluster.info.nodes) if n != leader)
    node = load_cluster(cluster.info.directory).nodes[follower]
    cluster.kill(follower)

    _flip_inside(Path(node.directory) / "data" / "log.lmdb" / "data.mdb", _value(BATCHES // 2, 1)[:16])
    cluster.start(follower)
    _wait_for_log_line(Path(node.directory) / "node.log", "cut a damaged log suffix", 60)
    if scrubbing:
        assert "the scrubber found a damaged entry" in (Path(node.directory) / "node.log").read_text()

    acked += _write_acknowledged(cluster, BATCHES + 1, 10, producer_id)  # the repaired replica takes writes too
    wait_settled(cluster, TOPIC, 60, preferred_leaders=False)
    _wait_for_log_line(Path(node.directory) / "node.log", "a repaired replica has its entries back", 60)
    assert cluster.leader(TOPIC, 0) == leader  # the damaged replica never disturbed the leader

    read = [value for _, value in fetch_all(cluster.client, TOPIC, 0)]
    if scrubbing:  # an idempotent producer: exactly once
        assert sorted(read) == sorted(acked) and len(read) == len(set(read))
    else:  # plain batches: one the client retried after losing its answer may be written twice, whole (Kafka's
        # at-least-once without idempotence, seen on a loaded machine), never in part, and nothing is lost
        assert set(read) == set(acked)
        copies: dict[bytes, set[int]] = {}
        for value, count in Counter(read).items():
            copies.setdefault(value[:12], set()).add(count)  # b"<acked-0007-": the value's batch
        assert all(len(counts) == 1 for counts in copies.values())
    cluster.client.close()
    cluster_down(cluster.info.directory)
    assert_replicas_identical(cluster.info.directory, TOPIC, 1)


def test_a_leader_whose_data_is_damaged_while_it_runs_hands_over_and_repairs_when_a_fetch_finds_it(
    cluster_factory: object,
) -> None:
    # No scrubber: the consumer's Fetch on the leader is the first to read the damaged batch. It is never
    # served; the leader gives up its damaged suffix (and with it the lead), another replica takes over, and
    # the consumer's retry reads everything.
    cluster: Cluster = cluster_factory(scrub_bytes_per_s=0)  # type: ignore[operator]
    cluster.create_topic(TOPIC, 1, 3)
    acked = _write_acknowledged(cluster, 0, BATCHES, -1)
    wait_settled(cluster, TOPIC, 60)  # with the preferred leader leading: no hand-back is due later
    leader = cluster.leader(TOPIC, 0)
    node = load_cluster(cluster.info.directory).nodes[leader]
    # The running node maps the file: the flipped bit is what its next read sees (the page cache is shared).
    _flip_inside(Path(node.directory) / "data" / "log.lmdb" / "data.mdb", _value(BATCHES // 2, 1)[:16])

    read = [value for _, value in fetch_all(cluster.client, TOPIC, 0)]
    _wait_for_log_line(Path(node.directory) / "node.log", "cut a damaged log suffix", 60)
    assert sorted(read) == sorted(acked) and len(read) == len(set(read))
    acked += _write_acknowledged(cluster, BATCHES, 10, -1)
    wait_settled(cluster, TOPIC, 60, preferred_leaders=False)
    _wait_for_log_line(Path(node.directory) / "node.log", "a repaired replica has its entries back", 60)

    read = [value for _, value in fetch_all(cluster.client, TOPIC, 0)]
    assert sorted(read) == sorted(acked) and len(read) == len(set(read))
    cluster.client.close()
    cluster_down(cluster.info.directory)
    assert_replicas_identical(cluster.info.directory, TOPIC, 1)


def _restart_and_verify(cluster: Cluster, follower: int, log_line: str, acked: list[bytes], *, settle_s: float) -> None:
    """Start the damaged follower, wait for ``log_line``, write more, then check every acknowledged record is read
    back exactly once and, with the cluster stopped, that every replica is byte-identical."""
    node = load_cluster(cluster.info.directory).nodes[follower]
    cluster.start(follower)
    _wait_for_log_line(Path(node.directory) / "node.log", log_line, 30)
    acked = acked + _write_acknowledged(cluster, BATCHES, 10, -1)
    wait_settled(cluster, TOPIC, settle_s, preferred_leaders=False)
    read = [value for _, value in fetch_all(cluster.client, TOPIC, 0)]
    assert sorted(read) == sorted(acked) and len(read) == len(set(read))
    cluster.client.close()
    cluster_down(cluster.info.directory)
    assert_replicas_identical(cluster.info.directory, TOPIC, 1)


def _repairable_cut(data_file: Path, scratch: Path) -> int | None:
    """The largest cut of the file's tail (16 pages down to 1) that spares LMDB's main database, if any.

    Where LMDB puts the directory of logs depends on which freed pages it reused (often the last page), and a
    cut through it is the open case of docs/reliability.md (the node cannot keep any log), so the cut is tried
    on a copy first.
    """
    size = data_file.stat().st_size
    copy = scratch / "cut" / "log.lmdb" / "data.mdb"
    copy.parent.mkdir(parents=True, exist_ok=True)
    for pages in (16, 12, 8, 6, 4, 3, 2, 1):
        copy.write_bytes(data_file.read_bytes()[: size - pages * 4096])
        if check_store(copy.parent.parent).unrecoverable is None:
            return size - pages * 4096
    return None


def test_a_follower_whose_data_file_was_truncated_starts_keeps_the_valid_prefix_and_repairs_from_the_leader(
    cluster_factory: object, tmp_path: Path
) -> None:
    # Before, the node refused to start ("file is truncated"). Now it keeps the longest valid prefix of every
    # log (the damaged file is kept aside), records where each cut log ended, and catches up.
    cluster: Cluster = cluster_factory()  # type: ignore[operator]
    cluster.create_topic(TOPIC, 1, 3)
    acked = _write_acknowledged(cluster, 0, BATCHES, -1)
    wait_settled(cluster, TOPIC, 60)  # with the preferred leader leading: no hand-back is due later
    leader = cluster.leader(TOPIC, 0)
    follower = next(n for n in sorted(cluster.info.nodes) if n != leader)
    node = load_cluster(cluster.info.directory).nodes[follower]
    data_file = Path(node.directory) / "data" / "log.lmdb" / "data.mdb"
    cut = None
    for attempt in range(6):  # until a cut spares the directory of logs: more writes move it
        cluster.kill(follower)
        cut = _repairable_cut(data_file, tmp_path)
        if cut is not None:
            break
        cluster.start(follower)
        acked += _write_acknowledged(cluster, BATCHES + 10 * (attempt + 1), 10, -1)
        wait_settled(cluster, TOPIC, 60)
    assert cut is not None, f"every cut of the last 16 pages of {data_file} destroys its main database"
    with data_file.open("r+b") as raw:
        raw.truncate(cut)

    _restart_and_verify(cluster, follower, "repaired the log store", acked, settle_s=60)


def _recorded_terms_cover_the_stored_ones(data_dir: Path) -> int:
    """Every log's stored term is at most the term recorded for its group outside the store; returns how many
    logs were compared."""
    owner = ThreadOwner("scheduler")
    owner.bind()
    guard = TermGuard.open(data_dir, owner)
    compared = 0
    with LogStore.open(data_dir) as store:
        for topic, partition in store.logs():
            log = store.log(topic, partition, create=False)
            described = log.attribute("node.group")
            group_id = 0 if described is None else int(json.loads(described)["group_id"])
            assert log.hard_state().term <= guard.floor(group_id), (topic, partition, guard.floor(group_id))
            compared += 1
    return compared


def test_a_follower_whose_store_lost_its_directory_of_logs_is_rebuilt_from_its_peers(
    cluster_factory: object,
) -> None:
    # Before, the node refused to start ("cannot repair ...: the main database is damaged"). Now it sets the store
    # aside, starts empty, and every replica (the metadata's too) comes back from its peers, held by the terms
    # recorded outside the store to neither vote nor campaign before it holds what it may have acknowledged.
    cluster: Cluster = cluster_factory()  # type: ignore[operator]
    cluster.create_topic(TOPIC, 1, 3)
    acked = _write_acknowledged(cluster, 0, BATCHES, -1)
    wait_settled(cluster, TOPIC, 60)
    leader = cluster.leader(TOPIC, 0)
    follower = next(n for n in sorted(cluster.info.nodes) if n != leader)
    node = load_cluster(cluster.info.directory).nodes[follower]
    data_dir = Path(node.directory) / "data"
    cluster.kill(follower)
    assert _recorded_terms_cover_the_stored_ones(data_dir) >= 2  # the metadata and the topic at least
    data_file = data_dir / "log.lmdb" / "data.mdb"
    with data_file.open("r+b") as raw:
        raw.truncate(2 * 4096)  # only LMDB's two meta pages are left: the directory of logs is gone
    assert check_store(data_dir).unrecoverable is not None

    _restart_and_verify(cluster, follower, "every replica is rebuilt from its peers", acked, settle_s=90)
    aside = [p.name for p in data_dir.iterdir() if p.name.startswith("log.lmdb.unrepairable-")]
    assert len(aside) == 1
