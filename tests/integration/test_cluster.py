"""A 3-node cluster of real processes on 127.0.0.1: replication, failover, restarts, partitions, retention."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from multiraft import controller as ctl
from multiraft.node.replicas.controller import CONTROLLER_TOPIC, SNAPSHOT_EVERY
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.tools.launcher import cluster_down, kill_node, load_cluster
from rpc.proto import multiraft_pb2 as pb
from storage import LogStore
from tests.integration._helpers import (
    BackgroundProducer,
    Cluster,
    assert_replicas_identical,
    fetch_all,
    produce,
    record_values,
    wait_settled,
)

pytestmark = pytest.mark.integration


def _batches_per_partition(cluster: Cluster, topic: str, partitions: int, batches: int) -> None:
    """Produce ``batches`` batches round-robin across partitions, several in flight."""

    def run(partition: int) -> None:
        for sequence in range(partition, batches, partitions):
            produce(cluster.client, topic, partition, record_values(partition, sequence, 0, 3))

    with ThreadPoolExecutor(partitions) as pool:
        list(pool.map(run, range(partitions)))


def test_three_nodes_replicate_ten_thousand_batches_and_serve_them_back_in_order(cluster: Cluster) -> None:
    topic = cluster.create_topic("orders", partitions=6, replication_factor=3)
    assert len(topic.partitions) == 6
    assert all(sorted(p.replicas) == [1, 2, 3] for p in topic.partitions)
    assert sorted(p.preferred_leader for p in topic.partitions) == [1, 1, 2, 2, 3, 3]
    _batches_per_partition(cluster, "orders", 6, 10_000)
    for partition in range(6):
        records = fetch_all(cluster.client, "orders", partition)
        assert [offset for offset, _ in records] == list(range(len(records)))
        expected = [v for seq in range(partition, 10_000, 6) for v in record_values(partition, seq, 0, 3)]
        assert [value for _, value in records] == expected


def test_killing_each_partition_leader_in_turn_loses_no_acknowledged_write(cluster: Cluster) -> None:
    cluster.create_topic("payments", partitions=6, replication_factor=3)
    producer = BackgroundProducer(cluster.client, "payments", 6).start()
    try:
        time.sleep(1)
        for round_ in range(6):
            led: list[int] = []
            for _ in range(100):  # a hand-back between the two reads moves the leader: read again (bounded)
                victim = cluster.leader("payments", round_)
                led = [p.partition for p in cluster.describe("payments").partitions if p.leader == victim]
                if round_ in led:
                    break
                time.sleep(0.1)
            assert round_ in led
            before = producer.acked_count()
            cluster.kill(victim)
            dead_at = time.monotonic()  # kill() returns once the process is gone
            # Writes resumed on a partition once a batch sent after the death is acknowledged (by a new leader).
            deadline = dead_at + 10
            resumed: set[int] = set()
            for _ in range(10_000):
                for partition in led:
                    acked = producer.first_ack_sent_after(partition, dead_at)
                    if acked is not None:
                        resumed.add(partition)
                if len(resumed) == len(led) or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            assert sorted(resumed) == sorted(led), (
                f"round {round_}: writes to {sorted(set(led) - set(resumed))} never resumed after killing node {victim}"
            )
            cluster.start(victim)
            assert producer.acked_count() > before
        time.sleep(0.5)
    finally:
        producer.stop()

    for partition in range(6):
        records = fetch_all(cluster.client, "payments", partition)
        stored = [value for _, value in records]
        assert len(stored) == len(set(stored)), "a record was written twice"
        assert set(stored) <= producer.attempted
        by_value = {value: offset for offset, value in records}
        for offset, values in producer.acked[partition]:
            assert [by_value.get(v) for v in values] == list(range(offset, offset + len(values))), (
                f"acknowledged batch at {offset} of payments/{partition} is missing or moved"
            )

    # Once every follower has every entry and no leadership hand-back is due, the nodes are crashed together
    # (no node outlives the others long enough to elect a leader and append): every replica holds the same bytes.
    wait_settled(cluster, "payments", timeout_s=45)
    _crash_all(cluster)
    assert_replicas_identical(cluster.info.directory, "payments", 6)


def _crash_all(cluster: Cluster) -> None:
    """SIGKILL every node at once, then reap them."""
    info = cluster.info
    for node in info.nodes.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGKILL)
    for node_id, node in info.nodes.items():
        kill_node(info, node_id)  # nothing left to kill: waits until the process is gone
        with contextlib.suppress(ChildProcessError):
            os.waitpid(node.pid, 0)


def test_stopping_and_restarting_the_whole_cluster_keeps_data_and_topics(cluster: Cluster) -> None:
    cluster.create_topic("ledger", partitions=3, replication_factor=3, retention_ms="86400000")
    acked = {p: [produce(cluster.client, "ledger", p, record_values(p, s, 0, 4)) for s in range(50)] for p in range(3)}
    before = {p: fetch_all(cluster.client, "ledger", p) for p in range(3)}
    cluster.restart_all()
    described = cluster.describe("ledger")
    assert len(described.partitions) == 3 and described.configs["retention.ms"] == "86400000"
    for partition in range(3):
        assert fetch_all(cluster.client, "ledger", partition) == before[partition]
        assert acked[partition] == [4 * s for s in range(50)]
    produce(cluster.client, "ledger", 0, [b"after restart"])


def test_the_controller_snapshots_its_metadata_compacts_its_log_and_restarts_from_the_snapshot(
    cluster: Cluster,
) -> None:
    topics = [f"meta{i}" for i in range(6)]
    for name in topics:
        cluster.create_topic(name, partitions=1, replication_factor=3)
    absent = 3  # misses every command below: it must be sent the snapshot, the entries are compacted away
    cluster.kill(absent)
    alters_per_topic = SNAPSHOT_EVERY // len(topics) + 20  # more commands than one snapshot interval

    def alter(name: str) -> None:
        for value in range(alters_per_topic):
            request = pb.AlterTopicConfigsRequest(name=name, set={"retention.ms": str(86_400_000 + value)})
            cluster.client.call_any(lambda stub, timeout, r=request: stub.AlterTopicConfigs(r, timeout=timeout))

    with ThreadPoolExecutor(len(topics)) as pool:
        list(pool.map(alter, topics))
    final = str(86_400_000 + alters_per_topic - 1)

    def configs_seen_by(node_id: int) -> dict[str, str]:
        stub = cluster.client.admin_stub(cluster.info.nodes[node_id].client_address)
        response = stub.ListTopics(pb.ListTopicsRequest(), timeout=10)
        return {t.name: t.configs.get("retention.ms", "") for t in response.topics if t.name in topics}

    cluster.start(absent)
    deadline = time.monotonic() + 30
    seen: dict[str, str] = {}
    for _ in range(1_000):
        with contextlib.suppress(grpc.RpcError):  # its channel may still be backing off from the kill
            seen = configs_seen_by(absent)
        if seen == dict.fromkeys(topics, final) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert seen == dict.fromkeys(topics, final), "the node that was away did not get the metadata"

    cluster.restart_all()
    for node_id in cluster.info.nodes:
        assert configs_seen_by(node_id) == dict.fromkeys(topics, final), f"node {node_id} lost metadata"
    produce(cluster.client, topics[0], 0, [b"after the restart"])

    directory = cluster.info.directory
    cluster_down(directory)
    for node_id, node in load_cluster(directory).nodes.items():
        with LogStore.open(Path(node.directory) / "data") as store:
            storage = RaftLogStorage(store.log(CONTROLLER_TOPIC, 0, create=False))
            snapshot = storage.snapshot()
            assert snapshot.meta.index >= SNAPSHOT_EVERY, f"node {node_id} never took a metadata snapshot"
            assert storage.first_index() == snapshot.meta.index + 1, f"node {node_id} did not compact its log"
            state = ctl.decode_snapshot(snapshot.data)
            assert state.applied_index == snapshot.meta.index
            assert set(topics) <= set(state.topics)


def test_a_frozen_follower_catches_up_after_sigcont_without_an_election(cluster: Cluster) -> None:
    # SIGSTOP freezes the follower's clock too, so it never times out while stopped; on SIGCONT it must not
    # burst through the missed ticks into an election. (The isolation test below is the one that exercises
    # PreVote: there the follower keeps ticking.)
    cluster.create_topic("audit", partitions=1, replication_factor=3)
    leader = cluster.leader("audit", 0)
    term = cluster.describe("audit").partitions[0].leader_epoch
    follower = next(n for n in cluster.info.nodes if n != leader)
    pid = cluster.info.nodes[follower].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        for sequence in range(200):
            produce(cluster.client, "audit", 0, record_values(0, sequence, 0, 2))
        time.sleep(1.5)  # several election timeouts pass while the follower is frozen
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 15
    partition = cluster.describe("audit").partitions[0]
    for _ in range(1_000):
        if follower in partition.in_sync_replicas or time.monotonic() > deadline:
            break
        time.sleep(0.1)
        partition = cluster.describe("audit").partitions[0]
    assert follower in partition.in_sync_replicas, "the follower did not catch up"
    assert (partition.leader, partition.leader_epoch) == (leader, term), "the returning follower caused an election"


def test_an_isolated_follower_that_keeps_ticking_rejoins_without_deposing_any_leader_thanks_to_prevote(
    cluster_factory: Callable[..., Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MULTIRAFT_DEBUG_ISOLATION", "1")  # SIGUSR1 cuts a node's Raft traffic, and restores it
    cluster = cluster_factory()
    cluster.create_topic("audit", partitions=2, replication_factor=3)
    wait_settled(cluster, "audit", timeout_s=30)
    before = {p.partition: (p.leader, p.leader_epoch) for p in cluster.describe("audit").partitions}
    follower = next(n for n in cluster.info.nodes if n not in {leader for leader, _ in before.values()})
    node = cluster.info.nodes[follower]
    log_start = node.log_path.stat().st_size

    producer = BackgroundProducer(cluster.client, "audit", 2).start()
    try:
        time.sleep(0.5)  # the follower's groups are busy, not quiescent: they tick and will time out
        os.kill(node.pid, signal.SIGUSR1)
        _wait_for_line(node.log_path, log_start, r"debug isolation on", timeout_s=10)
        acked_before = producer.acked_count()
        time.sleep(2.0)  # four to eight election timeouts (250 to 500 ms each)
        assert producer.acked_count() > acked_before, "the two other replicas stopped committing"
        os.kill(node.pid, signal.SIGUSR1)
        healed = _wait_for_line(node.log_path, log_start, r"debug isolation off.*", timeout_s=10).group(0)
        assert int(re.search(r"pre_votes_dropped=(\d+)", healed).group(1)) > 0, f"it never campaigned: {healed}"
        assert int(re.search(r"received_dropped=(\d+)", healed).group(1)) > 0
        assert int(re.search(r"\bvotes_dropped=(\d+)", healed).group(1)) == 0  # a real vote needs a pre-vote won

        deadline = time.monotonic() + 30
        partitions = cluster.describe("audit").partitions
        for _ in range(1_000):
            if all(follower in p.in_sync_replicas for p in partitions) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
            partitions = cluster.describe("audit").partitions
        assert all(follower in p.in_sync_replicas for p in partitions), "the follower did not catch up"
        time.sleep(0.5)  # and keeps up with writes after the heal
    finally:
        producer.stop()
    after = {p.partition: (p.leader, p.leader_epoch) for p in cluster.describe("audit").partitions}
    assert after == before, "the returning follower caused an election"

    wait_settled(cluster, "audit", timeout_s=30)
    _crash_all(cluster)
    assert_replicas_identical(cluster.info.directory, "audit", 2)


def _wait_for_line(path: Path, start: int, pattern: str, timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    text = ""
    for _ in range(1_000):
        with path.open("rb") as handle:
            handle.seek(start)
            text = handle.read().decode(errors="replace")
        found = re.search(pattern, text)
        if found is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert found is not None, f"no {pattern!r} in {path} after {timeout_s}s:\n{text[-3000:]}"
    return found


def test_retention_drops_old_segments_on_every_replica_even_of_an_idle_partition(cluster: Cluster) -> None:
    cluster.create_topic(
        "clicks",
        partitions=2,
        replication_factor=3,
        retention_ms="1500",
        segment_ms="300",
        segment_bytes="4096",
    )
    for sequence in range(30):
        produce(cluster.client, "clicks", 0, record_values(0, sequence, 0, 5))
    produce(cluster.client, "clicks", 1, record_values(1, 0, 0, 5))  # then partition 1 stays idle
    # Every record expires: segment.ms rolls each active segment, retention.ms then drops it, so both logs
    # end up starting at their next offset (150 and 5), on the idle partition too.
    expected = {0: 30 * 5, 1: 5}
    deadline = time.monotonic() + 30
    starts: dict[int, int] = {}
    for _ in range(1_000):
        partitions = cluster.describe("clicks").partitions
        starts = {p.partition: p.log_start_offset for p in partitions}
        if starts == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert starts[0] == expected[0], "retention never dropped all of the busy partition's segments"
    assert starts[1] == expected[1], "retention never fired on the idle partition"

    # The drops are replicated commands: every replica dropped the same segments, to the same offset.
    directory = cluster.info.directory
    cluster_down(directory)
    for node_id, node in load_cluster(directory).nodes.items():
        with LogStore.open(Path(node.directory) / "data") as store:
            for partition in range(2):
                log = store.log("clicks", partition, create=False)
                assert (log.start_offset(), log.next_offset()) == (expected[partition],) * 2, (
                    f"node {node_id} still holds clicks/{partition} from offset {log.start_offset()}"
                )
    _assert_same_segments(directory, "clicks", 2)


def _assert_same_segments(directory: str, topic: str, partitions: int) -> None:
    layouts = []
    for node in load_cluster(directory).nodes.values():
        with LogStore.open(Path(node.directory) / "data") as store:
            layouts.append(
                [
                    [(s.base_index, s.last_index) for s in store.log(topic, p, create=False).segments()[:-1]]
                    for p in range(partitions)
                ]
            )
    assert all(layout == layouts[0] for layout in layouts), "replicas dropped or cut different segments"


def test_leadership_returns_to_the_preferred_leader_once_it_is_back_and_caught_up(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # Hand-back runs on its own schedule: with retention checks an hour apart it must still happen.
    cluster = cluster_factory(leader_balance_ms=300, retention_check_ms=3_600_000)
    topic = cluster.create_topic("balanced", partitions=3, replication_factor=3)
    preferred = {p.partition: p.preferred_leader for p in topic.partitions}
    victim = preferred[0]
    cluster.kill(victim)
    produce(cluster.client, "balanced", 0, [b"written while the preferred leader was away"])
    assert cluster.leader("balanced", 0) != victim
    cluster.start(victim)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        leaders = {p.partition: p.leader for p in cluster.describe("balanced").partitions}
        if leaders == preferred:
            break
        time.sleep(0.2)
    assert leaders == preferred


def test_deleting_a_topic_removes_its_groups_and_data_and_the_name_can_be_reused(cluster: Cluster) -> None:
    cluster.create_topic("scratch", partitions=2, replication_factor=3)
    for sequence in range(20):
        produce(cluster.client, "scratch", sequence % 2, record_values(0, sequence, 0, 3))
    stub = cluster.client.admin_stub(cluster.info.nodes[2].client_address)
    stub.DeleteTopic(pb.DeleteTopicRequest(name="scratch"), timeout=30)
    assert "scratch" not in [t.name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics]
    cluster.create_topic("scratch", partitions=1, replication_factor=3)
    assert fetch_all(cluster.client, "scratch", 0) == []
    produce(cluster.client, "scratch", 0, [b"fresh"])
    directory = cluster.info.directory
    cluster_down(directory)
    for node in load_cluster(directory).nodes.values():
        with LogStore.open(Path(node.directory) / "data") as store:
            assert sorted(p for t, p in store.logs() if t == "scratch") == [0]
            assert store.log("scratch", 0, create=False).next_offset() == 1


def test_an_idle_partition_stays_in_sync_and_a_killed_node_shows_as_dead(cluster: Cluster) -> None:
    cluster.create_topic("quiet", partitions=2, replication_factor=3)
    produce(cluster.client, "quiet", 0, [b"one"])
    time.sleep(2)  # long enough for the groups to go quiescent (no heartbeats)
    assert all(sorted(p.in_sync_replicas) == [1, 2, 3] for p in cluster.describe("quiet").partitions)

    cluster.kill(3)
    stub = cluster.client.admin_stub(cluster.info.nodes[1].client_address)
    deadline = time.monotonic() + 10
    states: dict[int, str] = {}
    while time.monotonic() < deadline:
        states = {n.node_id: n.state for n in stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=10).nodes}
        if states.get(3) == "dead":  # as the member-list declares it
            break
        time.sleep(0.1)
    assert states == {1: "alive", 2: "alive", 3: "dead"}
