"""After a full restart every partition is led again by its preferred leader without any hand-back: the
preferred leader's replica campaigns first and the others hold off (multiraft.node.scheduler.startup_elections)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ._helpers import Cluster, wait_settled

PARTITIONS = 12


def test_after_a_full_restart_every_partition_is_led_by_its_preferred_leader_without_hand_backs(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # No hand-back for an hour, and election timeouts long enough that a node starting a little later than its
    # peers still campaigns before their hold ends (the hold is two election timeouts here).
    cluster = cluster_factory(leader_balance_ms=3_600_000, tick_ms=50, election_ticks=40, heartbeat_ticks=4)
    cluster.create_topic("restarted", partitions=PARTITIONS, replication_factor=3)
    wait_settled(cluster, "restarted", 60)  # at creation the preferred leaders campaign first as well

    cluster.restart_all()
    deadline = time.monotonic() + 60
    partitions = cluster.describe("restarted").partitions
    for _ in range(600):
        partitions = cluster.describe("restarted").partitions
        if all(p.leader for p in partitions) or time.monotonic() > deadline:
            break
        time.sleep(0.1)

    assert [p.leader for p in partitions] == [p.preferred_leader for p in partitions]
    assert sorted({p.preferred_leader for p in partitions}) == [1, 2, 3]
