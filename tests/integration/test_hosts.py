"""Several nodes per machine: a cluster launched with ``--nodes-per-host`` registers each node's host, and the
controller then never puts two replicas of a partition on one host.

DescribeCluster has no field for a node's host (the proto is unchanged), so the registration is observed
through what it decides: where replicas go.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from multiraft.tools.cli._cluster import cluster_app
from multiraft.tools.launcher import cluster_down, load_cluster
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from tests.integration._helpers import FAST

pytestmark = pytest.mark.integration


def test_a_cluster_launched_with_two_nodes_per_host_keeps_each_partition_on_two_hosts(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    settings = [f"--set={key}={value}" for key, value in FAST.items()]
    try:
        result = CliRunner().invoke(
            cluster_app, ["up", "--dir", str(directory), "--nodes", "3", "--nodes-per-host", "2", *settings]
        )
        assert result.exit_code == 0, result.output
        info = load_cluster(directory)
        hosts = {n.node_id: tomllib.loads(n.config_path.read_text())["host"] for n in info.nodes.values()}
        assert hosts == {1: "host-1", 2: "host-1", 3: "host-2"}
        with ClusterClient(info.bootstrap, request_timeout_s=30) as client:
            request = pb.CreateTopicRequest(name="orders", partitions=6, replication_factor=2)
            # Until every node has registered, placement may find one host too few: the client retries that.
            topic = client.call_any(lambda stub, timeout: stub.CreateTopic(request, timeout=timeout)).topic
        # Without hosts, 6 partitions of 2 replicas on 3 nodes would put 2 of them on nodes 1 and 2.
        assert [sorted(p.replicas) for p in topic.partitions if 3 not in p.replicas] == []
        assert all(len(p.replicas) == 2 for p in topic.partitions)
    finally:
        if (directory / "cluster.json").exists():
            cluster_down(directory)
