"""``multiraft group ...`` and the groups part of ``multiraft status`` against a fake Admin: what each command
prints, what it asks the cluster to commit, and what it refuses. (tests/cli/test_groups.py runs them against
a real cluster.)"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest

from multiraft import (
    ClusterInfo,
    ConnectionFailedError,
    CoordinatorMovedError,
    GroupDescription,
    GroupListing,
    GroupListingResult,
    GroupMemberInfo,
    GroupNotEmptyError,
    LeaderNotAvailableError,
    PartitionInfo,
    TopicInfo,
    TopicPartition,
    UnavailablePartition,
    UnknownMemberError,
)
from multiraft.tools.cli import _consumer_group as group_cli
from multiraft.tools.cli import _status as status_cli
from multiraft.tools.cli._consumer_group import PARTIAL_EXIT_CODE
from rpc.client._admin import NodeInfo
from tests.cli._helpers import invoke, invoked

TP = TopicPartition


def _member(member_id: str, *partitions: tuple[str, int], instance: str | None = None) -> GroupMemberInfo:
    return GroupMemberInfo(
        member_id=member_id,
        group_instance_id=instance,
        client_id=f"client-{member_id}",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        topics=tuple(sorted({t for t, _ in partitions})),
        assignment=tuple(TP(t, p) for t, p in partitions),
    )


def _group(name: str, state: str, *members: GroupMemberInfo) -> GroupDescription:
    return GroupDescription(
        group=name,
        state=state,
        protocol_type="consumer" if members else "",
        protocol="cooperative-sticky" if members else "",
        generation=4 if members else 0,
        leader_id=members[0].member_id if members else "",
        coordinator_id=2,
        members=members,
    )


class FakeAdmin:
    """The Admin calls the group commands make, answered from dicts; commits are recorded."""

    def __init__(self) -> None:
        # events: partition 0 holds 10..99, partition 1 holds 0..39
        self.log = {("events", 0): (10, 100), ("events", 1): (0, 40)}
        self.by_time = {("events", 0): 70, ("events", 1): -1}
        self.groups = {
            "spark-monitor": _group("spark-monitor", "Empty"),
            "billing": _group("billing", "Stable", _member("m-1", ("events", 0)), _member("m-2", ("events", 1))),
        }
        self.committed: dict[str, dict[TopicPartition, int]] = {
            "spark-monitor": {TP("events", 0): 60, TP("events", 1): 40},
            "billing": {TP("events", 0): 90},
        }
        self.commits: list[tuple[str, dict[tuple[str, int], int]]] = []
        self.refuse_commit = False
        self.unavailable: tuple[UnavailablePartition, ...] = ()  # offsets partitions that do not answer
        self.stuck: set[str] = set()  # calls that never return (until the test ends)
        self.released = threading.Event()

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def list_groups(self) -> list[str]:
        return sorted(self.groups)

    def list_group_listings(self) -> list[GroupListing]:
        return [GroupListing(g.group, g.state, g.protocol_type, len(g.members)) for _, g in sorted(self.groups.items())]

    def list_groups_result(self) -> GroupListingResult:
        self._maybe_stuck("list_groups_result")
        return GroupListingResult(tuple(self.list_group_listings()), self.unavailable)

    def _maybe_stuck(self, call: str) -> None:
        if call in self.stuck:
            self.released.wait(60)
            raise ConnectionFailedError("the test ended")

    def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        return {g: self.groups.get(g, _group(g, "Dead")) for g in groups}

    def delete_groups(self, groups: Iterable[str]) -> dict[str, Exception | None]:
        results: dict[str, Exception | None] = {}
        for g in groups:
            if self.groups.get(g, _group(g, "Dead")).members:
                results[g] = GroupNotEmptyError(f"group {g!r} has members")
            else:
                results[g] = None
                self.groups.pop(g, None)
        return results

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        return dict(self.committed.get(group, {}))

    def list_offsets(self, topic: str, spec: Any, partitions: Iterable[int] | None = None) -> dict[int, int]:
        chosen = [p for t, p in self.log if t == topic] if partitions is None else list(partitions)
        if spec == "earliest":
            return {p: self.log[(topic, p)][0] for p in chosen}
        if spec == "latest":
            return {p: self.log[(topic, p)][1] for p in chosen}
        return {p: self.by_time[(topic, p)] for p in chosen}

    def commit_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        if self.refuse_commit:
            raise UnknownMemberError("the group has members")
        self.commits.append((group, dict(offsets)))

    def describe_cluster(self) -> ClusterInfo:
        self._maybe_stuck("describe_cluster")
        nodes = tuple(NodeInfo(n, f"127.0.0.1:700{n}", "", "alive") for n in (1, 2, 3))
        return ClusterInfo("test", 1, nodes, (), (), 0)

    def list_topics(self) -> list[TopicInfo]:
        return [self.describe_topic("events")]

    def describe_topic(self, name: str) -> TopicInfo:
        self._maybe_stuck("describe_topic")
        partitions = tuple(
            PartitionInfo(p, 1, (1, 2, 3), (1, 2, 3), 1, end, start, 2) for (t, p), (start, end) in self.log.items()
        )
        return TopicInfo(name, partitions, {}, 3)


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAdmin]:
    fake = FakeAdmin()
    monkeypatch.setattr(group_cli, "open_admin", lambda *args: fake)
    monkeypatch.setattr(status_cli, "open_admin", lambda *args: fake)
    yield fake
    fake.released.set()


def _run(*args: str) -> Any:
    return invoke(*args, bootstrap="127.0.0.1:1")


def test_group_list_shows_state_protocol_and_members(admin: FakeAdmin) -> None:
    assert json.loads(invoked(_run("group", "list", "--json"))) == [
        {"group": "billing", "state": "Stable", "protocol_type": "consumer", "members": 2},
        {"group": "spark-monitor", "state": "Empty", "protocol_type": "", "members": 0},
    ]
    table = invoked(_run("group", "list"))
    assert "billing" in table and "Stable" in table and "spark-monitor" in table


def test_describe_shows_a_group_with_committed_offsets_only(admin: FakeAdmin) -> None:
    payload = json.loads(invoked(_run("group", "describe", "spark-monitor", "--json")))
    assert payload["state"] == "Empty" and payload["members"] == [] and payload["lag"] == 40
    assert payload["coordinator"] == {"node_id": 2, "address": "127.0.0.1:7002"}
    assert [
        (p["topic"], p["partition"], p["committed"], p["log_end_offset"], p["lag"]) for p in payload["partitions"]
    ] == [
        ("events", 0, 60, 100, 40),
        ("events", 1, 40, 40, 0),
    ]
    table = invoked(_run("group", "describe", "spark-monitor"))
    assert "state: Empty" in table and "coordinator: node 2 (127.0.0.1:7002)" in table and "lag: 40" in table


def test_describe_shows_each_partitions_owner_and_each_members_lag(admin: FakeAdmin) -> None:
    payload = json.loads(invoked(_run("group", "describe", "billing", "--json")))
    assert (payload["state"], payload["assignor"], payload["generation"], payload["leader_id"]) == (
        "Stable",
        "cooperative-sticky",
        4,
        "m-1",
    )
    rows = {(p["topic"], p["partition"]): (p["member_id"], p["committed"], p["lag"]) for p in payload["partitions"]}
    assert rows == {("events", 0): ("m-1", 90, 10), ("events", 1): ("m-2", None, None)}
    assert {m["member_id"]: m["lag"] for m in payload["members"]} == {"m-1": 10, "m-2": None}
    table = invoked(_run("group", "describe", "billing"))
    assert "m-1 (leader)" in table and "client-m-2" in table


def test_describe_says_when_a_group_does_not_exist(admin: FakeAdmin) -> None:
    assert "does not exist" in invoked(_run("group", "describe", "nobody"))


def test_reset_offsets_prints_the_plan_and_commits_nothing_without_execute(admin: FakeAdmin) -> None:
    payload = json.loads(
        invoked(_run("group", "reset-offsets", "spark-monitor", "--all-topics", "--to-earliest", "--json"))
    )
    assert payload["executed"] is False
    assert [(o["topic"], o["partition"], o["current"], o["new"]) for o in payload["offsets"]] == [
        ("events", 0, 60, 10),
        ("events", 1, 40, 0),
    ]
    assert admin.commits == []
    assert "dry run" in invoked(_run("group", "reset-offsets", "spark-monitor", "--topic", "events", "--to-latest"))
    assert admin.commits == []


def test_reset_offsets_with_execute_commits_the_clamped_offsets(admin: FakeAdmin) -> None:
    out = invoked(
        _run("group", "reset-offsets", "spark-monitor", "--topic", "events:0", "--shift-by", "100", "--execute")
    )
    assert admin.commits == [("spark-monitor", {("events", 0): 100})]
    assert "clamped from 160" in out and "committed 1 offsets" in out
    invoked(
        _run(
            "group",
            "reset-offsets",
            "spark-monitor",
            "--topic",
            "events",
            "--to-datetime",
            "2026-01-01T00:00:00Z",
            "--execute",
        )
    )
    assert admin.commits[-1] == ("spark-monitor", {("events", 0): 70, ("events", 1): 40})
    invoked(_run("group", "reset-offsets", "fresh", "-t", "events:0", "--by-duration", "PT1H", "--execute"))
    assert admin.commits[-1] == ("fresh", {("events", 0): 70})
    invoked(_run("group", "reset-offsets", "fresh", "-t", "events:1", "--to-offset", "5", "--execute"))
    assert admin.commits[-1] == ("fresh", {("events", 1): 5})


def test_reset_offsets_is_refused_while_the_group_has_members(admin: FakeAdmin) -> None:
    result = _run("group", "reset-offsets", "billing", "--all-topics", "--to-earliest", "--execute")
    assert result.exit_code == 1
    assert "has active members" in result.stderr and "stop them first" in result.stderr
    assert admin.commits == []


def test_reset_offsets_says_so_when_a_member_joins_before_the_commit(admin: FakeAdmin) -> None:
    admin.refuse_commit = True
    result = _run("group", "reset-offsets", "spark-monitor", "--all-topics", "--to-earliest", "--execute")
    assert result.exit_code == 1 and "stop them first" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--all-topics",),  # no target
        ("--to-earliest",),  # no scope
        ("--all-topics", "--topic", "events", "--to-earliest"),
        ("--all-topics", "--to-earliest", "--to-latest"),
        ("--topic", "events:x", "--to-earliest"),
    ],
)
def test_reset_offsets_usage_errors_exit_2(admin: FakeAdmin, args: tuple[str, ...]) -> None:
    result = _run("group", "reset-offsets", "spark-monitor", *args)
    assert result.exit_code == 2, result.output
    assert admin.commits == []


def test_delete_reports_each_group_and_fails_when_one_has_members(admin: FakeAdmin) -> None:
    result = _run("group", "delete", "spark-monitor", "billing", "--yes")
    assert result.exit_code == 1
    assert "deleted group 'spark-monitor'" in result.stdout
    assert "group 'billing' not deleted" in result.stderr and "NON_EMPTY_GROUP" in result.stderr
    assert "spark-monitor" not in admin.groups and "billing" in admin.groups


def test_delete_asks_for_confirmation_without_yes(admin: FakeAdmin) -> None:
    result = _run("group", "delete", "spark-monitor")
    assert result.exit_code == 1 and "pass --yes" in result.stderr
    assert "spark-monitor" in admin.groups


def test_status_shows_each_groups_state_members_and_lag_and_each_members_lag(admin: FakeAdmin) -> None:
    status = json.loads(invoked(_run("status", "--json")))
    assert status["group_summaries"] == [
        {"group": "billing", "state": "Stable", "members": 2, "lag": 10},
        {"group": "spark-monitor", "state": "Empty", "members": 0, "lag": 40},
    ]
    assert [(m["group"], m["member_id"], m["partitions"], m["lag"]) for m in status["group_members"]] == [
        ("billing", "m-1", 1, 10),
        ("billing", "m-2", 1, None),
    ]
    rows = {(g["group"], g["topic"], g["partition"]): (g["committed"], g["lag"]) for g in status["groups"]}
    assert rows[("spark-monitor", "events", 0)] == (60, 40)
    table = invoked(_run("status"))
    assert "consumer groups" in table and "group members" in table and "m-2" in table


def test_status_shows_the_other_groups_when_one_cannot_be_described(admin: FakeAdmin) -> None:
    admin.groups["broken"] = dataclasses.replace(_group("broken", ""), error=CoordinatorMovedError("moving"))
    result = _run("status", "--json")
    assert result.exit_code == PARTIAL_EXIT_CODE, result.output
    status = json.loads(result.stdout)
    assert [g["group"] for g in status["group_summaries"]] == ["billing", "spark-monitor"]
    assert status["groups_error"] == "broken: moving (COORDINATOR_NOT_AVAILABLE)"
    table = _run("status").stdout
    assert "some consumer groups unavailable: broken" in table and "spark-monitor" in table


def test_describe_takes_several_groups_or_all_of_them_one_json_line_each(admin: FakeAdmin) -> None:
    lines = invoked(_run("group", "describe", "spark-monitor", "billing", "--json")).splitlines()
    assert [json.loads(line)["group"] for line in lines] == ["spark-monitor", "billing"]
    lines = invoked(_run("group", "describe", "--all-groups", "--json")).splitlines()
    assert [json.loads(line)["group"] for line in lines] == ["billing", "spark-monitor"]
    table = invoked(_run("group", "describe", "--all-groups"))
    assert "group billing" in table and "group spark-monitor" in table
    assert _run("group", "describe").exit_code == 2
    assert _run("group", "describe", "billing", "--all-groups").exit_code == 2
    admin.groups.clear()
    assert "no consumer groups" in invoked(_run("group", "describe", "--all-groups"))


WEDGED = UnavailablePartition(
    "__consumer_offsets",
    7,
    LeaderNotAvailableError("__consumer_offsets/7 (replicas 2,3): no leader elected", partition=7),
)


def test_group_list_lists_what_answered_names_the_partition_that_did_not_and_exits_partial(admin: FakeAdmin) -> None:
    admin.unavailable = (WEDGED,)
    result = _run("group", "list", "--json")
    assert result.exit_code == PARTIAL_EXIT_CODE
    assert [g["group"] for g in json.loads(result.stdout)] == ["billing", "spark-monitor"]
    assert "groups of __consumer_offsets/7 not listed" in result.stderr
    assert "no leader elected (LEADER_NOT_AVAILABLE)" in result.stderr
    table = _run("group", "list")
    assert table.exit_code == PARTIAL_EXIT_CODE and "billing" in table.stdout
    admin.groups.clear()
    empty = _run("group", "list")
    assert empty.exit_code == PARTIAL_EXIT_CODE and "no consumer groups" not in empty.stdout


def test_describe_shows_the_groups_it_could_and_names_the_one_whose_coordinator_has_no_leader(
    admin: FakeAdmin,
) -> None:
    wedged = LeaderNotAvailableError("__consumer_offsets/7 (replicas 2,3): no leader elected", partition=7)
    admin.groups["stuck"] = dataclasses.replace(_group("stuck", ""), error=wedged)
    result = _run("group", "describe", "stuck", "billing", "--json")
    assert result.exit_code == 1
    assert [json.loads(line)["group"] for line in result.stdout.splitlines()] == ["billing"]
    assert "cannot describe group 'stuck': __consumer_offsets/7 (replicas 2,3): no leader elected" in result.stderr


def test_status_shows_the_sections_that_answered_when_the_group_listing_never_does(admin: FakeAdmin) -> None:
    admin.stuck = {"list_groups_result"}
    result = _run("status", "--json", "--timeout", "1")
    assert result.exit_code == PARTIAL_EXIT_CODE, result.output
    status = json.loads(result.stdout)
    assert status["sections"]["cluster"] == {"available": True, "error": None}
    assert status["sections"]["topics"] == {"available": True, "error": None}
    assert status["sections"]["groups"]["available"] is False
    assert status["groups_error"] == "no answer within 1s (was listing the consumer groups)"
    assert [n["node_id"] for n in status["nodes"]] == [1, 2, 3]
    assert [t["name"] for t in status["topics"]] == ["events"]


def test_status_shows_the_groups_and_topics_when_the_cluster_section_never_answers(admin: FakeAdmin) -> None:
    admin.stuck = {"describe_cluster"}
    result = _run("status", "--timeout", "1")
    assert result.exit_code == PARTIAL_EXIT_CODE, result.output
    assert "cluster, nodes and replica moves unavailable: no answer within 1s (was describing the cluster)" in (
        " ".join(result.stdout.split())
    )
    assert "events" in result.stdout and "spark-monitor" in result.stdout


def test_status_names_the_offsets_partition_whose_groups_it_could_not_list(admin: FakeAdmin) -> None:
    admin.unavailable = (WEDGED,)
    result = _run("status", "--json")
    assert result.exit_code == PARTIAL_EXIT_CODE
    status = json.loads(result.stdout)
    assert [g["group"] for g in status["group_summaries"]] == ["billing", "spark-monitor"]
    assert status["groups_error"].startswith("groups of __consumer_offsets/7 not listed: ")


def test_status_shows_a_partition_no_leader_answered_for_as_such_not_as_an_empty_one(admin: FakeAdmin) -> None:
    real = admin.describe_topic

    def one_silent(name: str) -> TopicInfo:
        described = real(name)
        silent = dataclasses.replace(described.partitions[1], in_sync_replicas=(), high_watermark=0, leader_epoch=0)
        return dataclasses.replace(described, partitions=(described.partitions[0], silent))

    admin.describe_topic = one_silent  # type: ignore[method-assign]
    status = json.loads(invoked(_run("status", "--json")))
    (events,) = status["topics"]
    silent = events["partitions"][1]
    assert (silent["leader"], silent["leader_answered"], silent["last_known_leader"]) == (0, False, 1)
    assert silent["high_watermark"] is None
    # spark-monitor committed 40 on events/1: its lag there is unknown, not 0 - 40
    rows = {(g["group"], g["partition"]): g["lag"] for g in status["groups"] if g["topic"] == "events"}
    assert rows[("spark-monitor", 1)] is None and rows[("spark-monitor", 0)] == 40
    table = invoked(_run("status"))
    assert "no leader answering (last known leader: node 1)" in " ".join(table.split())


def test_status_says_the_moves_in_flight_are_unknown_when_the_controller_leader_did_not_answer(
    admin: FakeAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    silent = "the controller leader (node 2) did not say which moves are in flight within 2s: timed out"
    described = dataclasses.replace(admin.describe_cluster(), moves_error=silent)
    monkeypatch.setattr(admin, "describe_cluster", lambda: described)
    result = _run("status", "--json")
    assert result.exit_code == PARTIAL_EXIT_CODE
    status = json.loads(result.stdout)
    assert status["sections"]["moves"] == {"available": False, "error": silent}
    assert status["sections"]["cluster"] == {"available": True, "error": None}
    table = " ".join(_run("status").stdout.split())
    assert "moves in flight: ?" in table and f"replica moves in flight unavailable: {silent}" in table


def test_status_flags_a_partition_whose_leader_has_no_quorum_in_sync(admin: FakeAdmin) -> None:
    # A quiescent leader whose followers died keeps its role until something wakes it: it still answers.
    real = admin.describe_topic

    def alone(name: str) -> TopicInfo:
        described = real(name)
        lonely = dataclasses.replace(described.partitions[0], in_sync_replicas=(1,))
        return dataclasses.replace(described, partitions=(lonely, described.partitions[1]))

    admin.describe_topic = alone  # type: ignore[method-assign]
    status = json.loads(invoked(_run("status", "--json")))
    assert [p["quorum_in_sync"] for p in status["topics"][0]["partitions"]] == [False, True]
    assert "no quorum in sync (1 of 3): writes wait" in " ".join(invoked(_run("status")).split())


def test_describe_all_groups_describes_those_listed_and_names_the_partitions_that_were_not(admin: FakeAdmin) -> None:
    admin.unavailable = (WEDGED,)
    result = _run("group", "describe", "--all-groups", "--json")
    assert result.exit_code == PARTIAL_EXIT_CODE
    assert [json.loads(line)["group"] for line in result.stdout.splitlines()] == ["billing", "spark-monitor"]
    assert "groups of __consumer_offsets/7 not listed" in result.stderr
