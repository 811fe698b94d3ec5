"""Consumer groups under faults, with every member a process of its own on a real 3-node cluster.

Members (:mod:`tests.integration.group_worker`) process records, then commit their positions; they are killed
with SIGKILL, paused with SIGSTOP, restarted, and the coordinator's node is killed. What must hold throughout:
no partition is owned by two members in one generation, every record is processed at least once, and no
committed offset passes a record no member processed; a member the group moved on from cannot commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from multiraft.tools.launcher import cluster_down, cluster_up
from rpc.client._cluster import ClusterClient
from tests.integration._group_workers import (
    Workers,
    assert_commits_skip_nothing,
    assert_no_partition_owned_twice,
    committed,
    describe,
    processed,
    stable_assignment,
    wait_for,
    workers_in,
)
from tests.integration._helpers import FAST, BackgroundProducer, Cluster, produce

PARTITIONS = 6
SESSION_S = 3.0
GROUPS = {"group_min_session_timeout_ms": 500, "group_initial_rebalance_delay_ms": 200}


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    info = cluster_up(tmp_path_factory.mktemp("groups") / "cluster", 3, {**FAST, **GROUPS})
    cluster = Cluster(info, ClusterClient(info.bootstrap, request_timeout_s=30))
    try:
        yield cluster
    finally:
        cluster.client.close()
        cluster_down(info.directory)


@pytest.fixture
def workers(group_cluster: Cluster, tmp_path: Path) -> Iterator[Workers]:
    yield from workers_in(tmp_path / "workers", group_cluster.bootstrap, session_timeout_s=SESSION_S)


def _topic(cluster: Cluster, name: str, records_per_partition: int) -> None:
    cluster.create_topic(name, PARTITIONS, 3)
    for partition in range(PARTITIONS):
        if records_per_partition:
            produce(
                cluster.client,
                name,
                partition,
                [b"%s-%d-%d" % (name.encode(), partition, r) for r in range(records_per_partition)],
            )


def _without(assignment: dict[str, set[int]] | None, member: str) -> dict[str, set[int]] | None:
    return assignment if assignment is not None and member not in assignment else None


def _all_records(count: int) -> set[tuple[int, int]]:
    return {(p, o) for p in range(PARTITIONS) for o in range(count)}


def test_three_members_share_six_partitions_with_no_overlap(group_cluster: Cluster, workers: Workers) -> None:
    _topic(group_cluster, "share", 50)
    members = [workers.start(f"m{i}", group="share-g", topic="share") for i in range(3)]

    assignment = wait_for("a stable group of 3", lambda: stable_assignment(group_cluster.client, "share-g", 3))
    assert sorted(len(parts) for parts in assignment.values()) == [2, 2, 2]
    assert set().union(*assignment.values()) == set(range(PARTITIONS))
    wait_for("every record processed", lambda: processed(workers) >= _all_records(50))

    for member in members:
        member.stop()
    assert_no_partition_owned_twice(workers)
    assert_commits_skip_nothing(processed(workers), committed(group_cluster.client, "share-g", "share", PARTITIONS), {})


def test_a_killed_member_loses_its_partitions_to_the_others(group_cluster: Cluster, workers: Workers) -> None:
    _topic(group_cluster, "kill", 10)
    members = [workers.start(f"k{i}", group="kill-g", topic="kill") for i in range(3)]
    before = wait_for("a stable group of 3", lambda: stable_assignment(group_cluster.client, "kill-g", 3))
    victim = wait_for("the victim's member id", lambda: members[0].member_id() or None)

    members[0].kill()
    after = wait_for(
        "the two survivors holding every partition",
        lambda: stable_assignment(group_cluster.client, "kill-g", 2),
        timeout_s=SESSION_S + 30,
    )
    assert victim in before and victim not in after
    assert set().union(*after.values()) == set(range(PARTITIONS))
    for partition in range(PARTITIONS):  # records written after the death reach the survivors
        produce(group_cluster.client, "kill", partition, [b"late"])
    wait_for("the late records processed", lambda: processed(workers) >= _all_records(11))
    for member in members[1:]:
        member.stop()
    assert_no_partition_owned_twice(workers)


def test_members_join_and_leave_one_by_one_while_a_producer_runs(group_cluster: Cluster, workers: Workers) -> None:
    group_cluster.create_topic("churn", PARTITIONS, 3)
    producer = BackgroundProducer(group_cluster.client, "churn", PARTITIONS, records_per_batch=5).start()
    try:
        first = workers.start("c0", group="churn-g", topic="churn")
        wait_for("one member", lambda: stable_assignment(group_cluster.client, "churn-g", 1))
        second = workers.start("c1", group="churn-g", topic="churn")
        wait_for("two members", lambda: stable_assignment(group_cluster.client, "churn-g", 2))
        third = workers.start("c2", group="churn-g", topic="churn")
        wait_for("three members", lambda: stable_assignment(group_cluster.client, "churn-g", 3))
        first.stop()  # leaves at once
        wait_for("two members after a leave", lambda: stable_assignment(group_cluster.client, "churn-g", 2))
        second.kill()  # found out by its session timeout
        wait_for("one member after a death", lambda: stable_assignment(group_cluster.client, "churn-g", 1), 60)
        fourth = workers.start("c3", group="churn-g", topic="churn")
        wait_for("two members again", lambda: stable_assignment(group_cluster.client, "churn-g", 2))
    finally:
        producer.stop()
    acked = {
        (p, offset + i)
        for p, batches in producer.acked.items()
        for offset, values in batches
        for i in range(len(values))
    }
    assert acked, "the producer wrote nothing"
    wait_for("every acknowledged record processed", lambda: processed(workers) >= acked, 120)
    third.stop()
    fourth.stop()

    assert_no_partition_owned_twice(workers)
    assert_commits_skip_nothing(processed(workers), committed(group_cluster.client, "churn-g", "churn", PARTITIONS), {})


def test_a_paused_member_that_comes_back_cannot_commit(group_cluster: Cluster, workers: Workers) -> None:
    _topic(group_cluster, "zombie", 20)
    zombie = workers.start("z0", group="zombie-g", topic="zombie", hold=True)
    wait_for("the zombie holding records it has not committed", lambda: zombie.events("holding"))
    stale_member = zombie.member_id()
    zombie.pause()
    survivor = workers.start("z1", group="zombie-g", topic="zombie")
    after = wait_for(
        "the group without the paused member",
        lambda: _without(stable_assignment(group_cluster.client, "zombie-g", 1), stale_member),
        timeout_s=SESSION_S + 30,
    )
    assert set().union(*after.values()) == set(range(PARTITIONS))
    everything = dict.fromkeys(range(PARTITIONS), 20)
    wait_for(
        "the survivor's commits of every record",
        lambda: committed(group_cluster.client, "zombie-g", "zombie", PARTITIONS) == everything,
    )

    zombie.resume()
    zombie.release_hold()
    refusal = wait_for("the zombie's commit refused", lambda: zombie.events("commit-refused"))
    assert refusal[0]["reason"] in {"UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "PARTITION_NOT_OWNED"}
    assert not [e for e in zombie.events("commit") if e["member"] == stale_member]
    assert committed(group_cluster.client, "zombie-g", "zombie", PARTITIONS) == everything
    zombie.stop()
    survivor.stop()
    assert_no_partition_owned_twice(workers)


def test_a_static_member_restarting_within_its_session_timeout_causes_no_rebalance(
    group_cluster: Cluster, workers: Workers
) -> None:
    _topic(group_cluster, "static", 5)
    settings = {"group": "static-g", "topic": "static", "session_timeout_s": 15.0}
    first = workers.start("s-a", instance="instance-a", **settings)
    other = workers.start("s-b", instance="instance-b", **settings)
    wait_for("a stable group of 2", lambda: stable_assignment(group_cluster.client, "static-g", 2))
    before = describe(group_cluster.client, "static-g")
    held = {m.group_instance_id: {tp.partition for tp in m.assignment} for m in before.members}

    first.kill()
    restarted = workers.start("s-a", instance="instance-a", **settings)
    wait_for("the restarted instance owning partitions", lambda: restarted.events("owned") and restarted.member_id())
    after = describe(group_cluster.client, "static-g")
    assert after.generation == before.generation, "the restart caused a rebalance"
    assert {m.group_instance_id: {tp.partition for tp in m.assignment} for m in after.members} == held
    assert not [e for e in other.events("revoke") if e["parts"]], "the other member gave partitions up"
    restarted.stop()
    other.stop()


def test_the_group_survives_the_loss_of_its_coordinator(group_cluster: Cluster, workers: Workers) -> None:
    _topic(group_cluster, "failover", 10)
    members = [workers.start(f"f{i}", group="failover-g", topic="failover") for i in range(3)]
    before = wait_for("a stable group of 3", lambda: stable_assignment(group_cluster.client, "failover-g", 3))
    coordinator = describe(group_cluster.client, "failover-g").coordinator_id
    assert coordinator

    group_cluster.kill(coordinator)
    try:
        for partition in range(PARTITIONS):
            produce(group_cluster.client, "failover", partition, [b"after-failover"], timeout_s=30)
        wait_for("records written after the failover processed", lambda: processed(workers) >= _all_records(11), 120)
        after = wait_for(
            "the group stable on the new coordinator",
            lambda: stable_assignment(group_cluster.client, "failover-g", 3),
            60,
        )
        assert describe(group_cluster.client, "failover-g").coordinator_id != coordinator
        assert set(after) == set(before), "the members had to join anew"
        for member in members:
            member.stop()
    finally:
        group_cluster.start(coordinator)
    assert_no_partition_owned_twice(workers)
    assert_commits_skip_nothing(
        processed(workers), committed(group_cluster.client, "failover-g", "failover", PARTITIONS), {}
    )
