"""Partial failure does not spread (issue 23): with ``__consumer_offsets`` partitions that cannot elect a
leader, ``multiraft status``, ``group list`` and calls on the other groups answer, and name what is stuck.

A real 3-node cluster whose offsets topic has replication factor 2: killing node 3 leaves every offsets
partition with a replica there one replica short of its quorum (no leader can be elected), while the
controller (three voters) and the partitions on nodes 1 and 2 keep working. Bounds are the commands' own
deadlines, never timings.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest

from multiraft import Admin
from multiraft.errors import LeaderNotAvailableError
from multiraft.node.replicas.offsets import group_partition
from multiraft.tools.cli._consumer_group import PARTIAL_EXIT_CODE
from tests.cli._helpers import run_cli
from tests.integration._helpers import FAST_GROUPS, Cluster

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 6
DEADLINE_S = 10  # the commands' --timeout
_NAMED = re.compile(r"__consumer_offsets/(\d+)")


def _groups_by_partition() -> dict[int, str]:
    """One group name per offsets partition."""
    found: dict[int, str] = {}
    for i in range(10_000):
        name = f"group-{i}"
        found.setdefault(group_partition(name, OFFSETS_PARTITIONS), name)
        if len(found) == OFFSETS_PARTITIONS:
            return found
    raise AssertionError("no group name for some partition")


def _named_partitions(text: str) -> set[int]:
    return {int(p) for p in _NAMED.findall(text)}


def _cli(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    result = run_cli(*args, "--timeout", str(DEADLINE_S), bootstrap=cluster.bootstrap, timeout_s=120)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def _wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        if check():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout_s}s")


def test_leaderless_offsets_partitions_are_named_while_status_group_list_and_the_other_groups_answer(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(
        3,
        default_replication_factor=2,
        offsets_partitions=OFFSETS_PARTITIONS,
        replica_replace_after_ms=600_000,  # the stuck partitions stay stuck: no repair onto nodes 1 and 2
        **FAST_GROUPS,
    )
    cluster.create_topic("events", 1, 3)
    cluster.create_topic("halves", 6, 2)
    groups = _groups_by_partition()
    with Admin(cluster.bootstrap, request_timeout_s=30) as admin:
        for group in groups.values():
            admin.commit_group_offsets(group, {("events", 0): 0})
        assert {g.group for g in admin.list_groups_result().listings} == set(groups.values())

        led_by_3 = {p.partition for p in admin.describe_topic("halves").partitions if p.leader == 3}
        assert led_by_3, "placement spreads the leaders of 6 partitions over 3 nodes"
        cluster.kill(3)

        # group list: the groups of the partitions that answered, the others named, exit "partial"
        code, out, err = _cli(cluster, "group", "list", "--json")
        assert code == PARTIAL_EXIT_CODE, (code, out, err)
        stuck = _named_partitions(err)
        assert stuck and len(stuck) < OFFSETS_PARTITIONS, err  # placement puts some on nodes 1 and 2 only
        assert "LEADER_NOT_AVAILABLE" in err, err
        listed = {g["group"] for g in json.loads(out)}
        assert listed == {group for p, group in groups.items() if p not in stuck}

        # describe: a group of a partition that answers is described, one of a stuck partition is named
        fine = next(group for p, group in groups.items() if p not in stuck)
        wedged_partition = min(stuck)
        wedged = groups[wedged_partition]
        code, out, err = _cli(cluster, "group", "describe", fine, wedged, "--json")
        assert code == 1, (code, out, err)
        assert [json.loads(line)["group"] for line in out.splitlines()] == [fine]
        assert f"cannot describe group {wedged!r}: __consumer_offsets/{wedged_partition} " in err, err

        # the other groups keep working: commits and offset reads
        admin.commit_group_offsets(fine, {("events", 0): 0})
        assert admin.group_offsets(fine) == {("events", 0): 0}
        with pytest.raises(LeaderNotAvailableError, match=f"__consumer_offsets/{wedged_partition} "):
            admin.group_offsets(wedged)

        # status: every section answered; the groups section lists the others and names the stuck partitions
        code, out, err = _cli(cluster, "status", "--json")
        assert code == PARTIAL_EXIT_CODE, (code, out, err)
        status = json.loads(out)
        assert all(s["available"] for s in status["sections"].values()), status["sections"]
        assert {g["group"] for g in status["group_summaries"]} == listed
        assert _named_partitions(status["groups_error"]) == stuck
        assert [t["name"] for t in status["topics"]] == ["events", "halves"]
        # a partition whose leader is gone is shown as such, not as an empty one (high watermark 0)
        halves = {p["partition"]: p for p in status["topics"][1]["partitions"]}
        for partition in led_by_3:
            assert not halves[partition]["leader_answered"] and halves[partition]["high_watermark"] is None
            assert halves[partition]["last_known_leader"] in (0, 3)
        # and one whose quiescent leader lost its only follower (it keeps its role until woken) cannot commit
        for partition in halves.values():
            if 3 in partition["replicas"]:
                assert not (partition["leader_answered"] and partition["quorum_in_sync"]), partition

        # node 3 back: every partition elects again and the listing is whole
        cluster.start(3)
        _wait_until(lambda: admin.list_groups_result().complete, 60, "a complete group listing after the restart")
        assert {g.group for g in admin.list_groups_result().listings} == set(groups.values())
        assert admin.group_offsets(wedged) == {("events", 0): 0}
