"""Encrypted gossip in a real 3-node cluster: nodes started with a keyring file form a cluster and replicate;
the three rotation steps, done by editing the file while the nodes run, lose no member and no record; a forged
plain-text SWIM packet is dropped and logged by the node it reaches."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from membership import MemberMeta, generate_key
from membership._wire import Alive, cluster_tag, encode_message, encode_packet
from multiraft.config.node import NodeConfig
from multiraft.tools.launcher import NodeProcess
from rpc.proto import multiraft_pb2 as pb
from tests.integration._helpers import Cluster, fetch_all, produce

pytestmark = pytest.mark.integration

DROPPED = "dropped gossip no key opens"


def _log(node: NodeProcess) -> str:
    return node.log_path.read_text(errors="replace")


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        if predicate():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def _states(cluster: Cluster) -> dict[int, str]:
    stub = cluster.client.admin_stub(cluster.info.nodes[1].client_address)
    return {n.node_id: n.state for n in stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=10).nodes}


def test_a_cluster_with_a_keyring_replicates_rotates_its_key_and_drops_plain_gossip(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    old, new = generate_key(), generate_key()
    keyring = tmp_path / "gossip.keyring"
    keyring.write_text(f"# the cluster's gossip key\n{old}\n")
    cluster = cluster_factory(gossip_keyring_file=str(keyring))
    nodes = list(cluster.info.nodes.values())
    assert all("gossip encryption on" in _log(node) for node in nodes)
    _wait(lambda: _states(cluster) == {1: "alive", 2: "alive", 3: "alive"}, "every node alive")
    cluster.create_topic("sealed", partitions=1, replication_factor=3)
    written = [b"before rotation"]
    produce(cluster.client, "sealed", 0, written[-1:])

    # One file read by all three nodes: each step is taken by every node (its log says so) before the next.
    for changes, step in enumerate(([old, new], [new, old], [new]), 1):
        keyring.write_text("".join(f"{key}\n" for key in step))
        _wait(
            lambda changes=changes: all(_log(n).count("gossip keyring changed") == changes for n in nodes),  # type: ignore[misc]
            f"rotation step {changes} taken by every node",
        )
        written.append(b"after step %d" % changes)
        produce(cluster.client, "sealed", 0, written[-1:])
        assert _states(cluster) == {1: "alive", 2: "alive", 3: "alive"}

    assert [value for _, value in fetch_all(cluster.client, "sealed", 0)] == written
    assert sorted(cluster.describe("sealed").partitions[0].in_sync_replicas) == [1, 2, 3]
    assert not [node.node_id for node in nodes if DROPPED in _log(node)]

    # A forger who knows the cluster name but not the key: its plain packets introduce a member in vain.
    target = cluster.info.nodes[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        raw.bind(("127.0.0.1", 0))
        attacker = f"127.0.0.1:{raw.getsockname()[1]}"
        alive = Alive(0, MemberMeta(666, "127.0.0.1:1", "127.0.0.1:2"), attacker)
        forged = encode_packet(cluster_tag(NodeConfig.cluster_id), 666, 4, [encode_message(alive)])
        for _ in range(3):
            host, _, port = target.gossip_address.rpartition(":")
            raw.sendto(forged, (host, int(port)))
    _wait(lambda: DROPPED in _log(target), "the forged packet logged as dropped")
    assert 666 not in _states(cluster)
