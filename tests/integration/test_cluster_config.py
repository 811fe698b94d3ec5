"""Dynamic cluster-wide settings on a 3-node cluster of real processes: applied by every node, no restart."""

from __future__ import annotations

import time

import pytest

from multiraft import Admin
from tests.integration._helpers import Cluster, produce, record_values

pytestmark = pytest.mark.integration


def test_a_cluster_retention_default_drops_old_segments_of_topics_without_their_own_and_spares_the_others(
    cluster: Cluster,
) -> None:
    for name, own in (("follows", {}), ("keeps", {"retention_ms": "-1"})):
        cluster.create_topic(name, partitions=1, replication_factor=3, segment_ms="300", segment_bytes="4096", **own)
        for sequence in range(10):
            produce(cluster.client, name, 0, record_values(0, sequence, 0, 5))
    admin = Admin(cluster.client)
    assert admin.alter_cluster_configs(set={"log.retention.ms": "500"})["log.retention.ms"].source == (
        "DYNAMIC_CLUSTER_CONFIG"
    )

    # segment.ms rolls the idle active segment, then the cluster's retention.ms drops it: the log empties.
    deadline = time.monotonic() + 30
    start = 0
    for _ in range(300):
        start = cluster.describe("follows").partitions[0].log_start_offset
        if start == 50 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert start == 50, "the cluster-wide retention.ms never applied to the topic without its own"
    assert cluster.describe("keeps").partitions[0].log_start_offset == 0  # its own retention.ms=-1 wins
