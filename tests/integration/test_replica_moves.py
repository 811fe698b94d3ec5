"""Replicas that move away and come back (issue 23): real processes on 127.0.0.1.

A scale-out user adds a node, drains it, changes their mind (undrain), and drains it again. Each drain
removes replicas from a running node; the undrain places replicas of the same groups on nodes that held them
before. Before the fix, a replica placed on a node again was taken for one that lost its log with the store:
it would neither vote nor campaign until it held an entry of a later term than any it had, so a group whose
voters were mostly such replicas could not elect, and the second drain never finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from multiraft import Admin
from multiraft.node.scheduler.reconciler import REMOVAL_GRACE_S
from multiraft.tools.launcher import add_node
from tests.integration._helpers import Cluster, fetch_all, produce
from tests.integration._helpers import wait_for as _wait

pytestmark = pytest.mark.integration

MOVING = {
    "replica_replace_after_ms": 1_000,
    "rebalance_interval_ms": 200,
    "max_concurrent_moves": 4,
}
TOPICS = {"events": 3, "audit": 4, "orders": 5}


def _replicas_on(admin: Admin, node_id: int) -> int:
    return {load.node_id: load.replicas for load in admin.describe_cluster().loads}.get(node_id, 0)


def _balanced(admin: Admin, nodes: set[int]) -> bool:
    """The replicas spread evenly over ``nodes`` (none elsewhere)."""
    loads = {load.node_id: load.replicas for load in admin.describe_cluster().loads}
    counts = [loads.get(n, 0) for n in nodes]
    return min(counts) > 0 and max(counts) - min(counts) <= 1 and sum(loads.values()) == sum(counts)


def _let_moved_replicas_drop() -> None:
    """A node deletes a replica moved off it once that has held for the removal grace; only a replica whose
    log is gone is placed again as a new one, which is the case under test."""
    time.sleep(REMOVAL_GRACE_S + 2)


def _healthy(cluster: Cluster) -> bool:
    """Every partition led by one of its replicas, every replica in sync."""
    for topic in TOPICS:
        for p in cluster.describe(topic).partitions:
            if not p.leader or p.leader not in p.replicas or set(p.in_sync_replicas) != set(p.replicas):
                return False
    return True


def test_drain_undrain_drain_of_an_added_node_ends_empty_with_every_partition_led_and_nothing_lost(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(3, **MOVING)
    admin = Admin(cluster.bootstrap)
    try:
        written: dict[tuple[str, int], list[bytes]] = {}
        for topic, partitions in TOPICS.items():
            cluster.create_topic(topic, partitions, 3)

        def write(round_: int) -> None:
            for topic, partitions in TOPICS.items():
                for partition in range(partitions):
                    values = [f"{topic}/{partition}/{round_}/{i}".encode() for i in range(3)]
                    produce(cluster.client, topic, partition, values)
                    written.setdefault((topic, partition), []).extend(values)

        write(0)
        add_node(cluster.info, 4)
        _wait(lambda: _balanced(admin, {1, 2, 3, 4}), 120, "node 4 given its share of replicas")
        _wait(lambda: _healthy(cluster), 60, "every partition led and in sync after the join")
        _let_moved_replicas_drop()
        write(1)

        _wait(lambda: admin.drain_node(4).safe_to_stop, 120, "the first drain of node 4")
        _let_moved_replicas_drop()
        write(2)

        admin.undrain_node(4)  # moves back onto node 4: replicas of groups it held before
        _wait(lambda: _balanced(admin, {1, 2, 3, 4}), 120, "node 4 given its share again after the undrain")
        _wait(lambda: _healthy(cluster), 60, "every partition led and in sync after the undrain")
        _let_moved_replicas_drop()
        write(3)

        _wait(lambda: admin.drain_node(4).safe_to_stop, 120, "the second drain of node 4")
        _wait(lambda: _healthy(cluster), 60, "every partition led and in sync after the second drain")
        write(4)

        # Every group must still elect without any one node: kill the node that leads the most partitions.
        leaders = [p.leader for topic in TOPICS for p in cluster.describe(topic).partitions]
        victim = max(set(leaders), key=leaders.count)
        cluster.kill(victim)
        for topic, partitions in TOPICS.items():
            for partition in range(partitions):
                cluster.leader(topic, partition, timeout_s=30, other_than=victim)
        write(5)
        cluster.start(victim)
        _wait(lambda: _healthy(cluster), 60, "every partition led and in sync after the restart")

        for (topic, partition), values in written.items():
            assert [value for _, value in fetch_all(cluster.client, topic, partition)] == values
    finally:
        admin.close()
