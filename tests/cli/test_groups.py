"""``multiraft group ...``, the Admin group calls and the groups in ``multiraft status`` against a real 3-node
cluster: a member made with raw JoinGroup/SyncGroup calls (as any Kafka-protocol client makes them), a group
with committed offsets only, reset-offsets dry run and --execute, and the refusals while a group has members."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest

from multiraft import Admin, Consumer, GroupNotEmptyError, Producer, TopicPartition, UnknownMemberError
from multiraft.errors import MemberIdAssignedError
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_rpc_error
from tests.cli._helpers import invoke, invoked, ok, one_error_line, run_cli
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration

TP = TopicPartition


@dataclass
class RawMember:
    """A group member driven by hand: joined and synced once, never heartbeating (a long session keeps it)."""

    channel: grpc.Channel
    group: str
    member_id: str = ""
    generation: int = -1

    @property
    def stub(self) -> pb_grpc.GroupsStub:
        return pb_grpc.GroupsStub(self.channel)

    def join(self, topics: list[str], assignment: list[tuple[str, int]]) -> None:
        """Join alone (the leader) and assign itself ``assignment``."""
        request = pb.JoinGroupRequest(
            group=self.group,
            session_timeout_ms=120_000,
            rebalance_timeout_ms=10_000,
            protocols=["range"],
            subscription=pb.GroupSubscription(topics=topics, owned_generation=-1),
            client_id="raw-client",
        )
        try:
            self.stub.JoinGroup(request, timeout=30)
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
            assert isinstance(error, MemberIdAssignedError), error
            request.member_id = error.member_id
        joined = self.stub.JoinGroup(request, timeout=30)
        self.member_id, self.generation = joined.member_id, joined.generation
        assert joined.leader_id == self.member_id
        sync = pb.SyncGroupRequest(
            group=self.group,
            member_id=self.member_id,
            generation=self.generation,
            assignments=[
                pb.MemberAssignment(
                    member_id=self.member_id,
                    partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in assignment],
                )
            ],
        )
        synced = self.stub.SyncGroup(sync, timeout=30)
        assert sorted((tp.topic, tp.partition) for tp in synced.assignment) == sorted(assignment)

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        request = pb.CommitOffsetsRequest(
            group=self.group,
            offsets=[pb.CommittedOffset(topic=t, partition=p, offset=o) for (t, p), o in offsets.items()],
            member_id=self.member_id,
            generation=self.generation,
        )
        pb_grpc.LogStub(self.channel).CommitOffsets(request, timeout=30)

    def leave(self) -> None:
        self.stub.LeaveGroup(pb.LeaveGroupRequest(group=self.group, member_id=self.member_id), timeout=30)


@pytest.fixture(scope="module")
def groups_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    from multiraft.tools.launcher import cluster_down, cluster_up
    from rpc.client._cluster import ClusterClient
    from tests.integration._helpers import FAST, FAST_GROUPS

    info = cluster_up(tmp_path_factory.mktemp("groups") / "cluster", 3, {**FAST, **FAST_GROUPS})
    cluster = Cluster(info, ClusterClient(info.bootstrap, request_timeout_s=30))
    try:
        cluster.create_topic("events", 2, 3)
        with Producer(info.bootstrap) as producer:
            producer.send_batch("events", [b"a%d" % i for i in range(10)], partition=0).result(30)
            producer.send_batch("events", [b"b%d" % i for i in range(4)], partition=1).result(30)
        yield cluster
    finally:
        cluster.client.close()
        cluster_down(info.directory)


@pytest.fixture
def member(groups_cluster: Cluster) -> Iterator[Callable[[str], RawMember]]:
    made: list[RawMember] = []
    channel = grpc.insecure_channel(groups_cluster.bootstrap.split(",")[0])

    def make(group: str) -> RawMember:
        made.append(RawMember(channel, group))
        return made[-1]

    yield make
    for raw in made:
        if raw.member_id:
            raw.leave()
    channel.close()


def test_a_group_with_committed_offsets_only_is_listed_described_and_deleted(groups_cluster: Cluster) -> None:
    bootstrap = groups_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.commit_group_offsets("offsets-only", {TP("events", 0): 7})
        listings = {g.group: g for g in admin.list_group_listings()}
        assert (listings["offsets-only"].state, listings["offsets-only"].members) == ("Empty", 0)
        described = admin.describe_groups(["offsets-only", "never-seen"])
        assert described["offsets-only"].state == "Empty" and described["offsets-only"].members == ()
        assert described["offsets-only"].coordinator_id in (1, 2, 3)
        assert described["never-seen"].state == "Dead"

    payload = json.loads(invoked(invoke("group", "describe", "offsets-only", "--json", bootstrap=bootstrap)))
    assert [
        (p["topic"], p["partition"], p["committed"], p["log_end_offset"], p["lag"]) for p in payload["partitions"]
    ] == [("events", 0, 7, 10, 3)]
    assert payload["coordinator"]["address"] is not None
    listed = json.loads(ok(run_cli("group", "list", "--json", bootstrap=bootstrap)))
    assert {"group": "offsets-only", "state": "Empty", "protocol_type": "", "members": 0} in listed

    assert "deleted group 'offsets-only'" in ok(
        run_cli("group", "delete", "offsets-only", "--yes", bootstrap=bootstrap)
    )
    with Admin(bootstrap) as admin:
        assert admin.group_offsets("offsets-only") == {}
        assert "offsets-only" not in admin.list_groups()


def test_describe_and_status_show_an_active_members_partitions_and_lag(
    groups_cluster: Cluster, member: Callable[[str], RawMember]
) -> None:
    bootstrap = groups_cluster.bootstrap
    raw = member("live")
    raw.join(["events"], [("events", 0), ("events", 1)])
    raw.commit({("events", 0): 4})

    payload = json.loads(invoked(invoke("group", "describe", "live", "--json", bootstrap=bootstrap)))
    assert (payload["state"], payload["assignor"], payload["generation"]) == ("Stable", "range", raw.generation)
    assert [m["member_id"] for m in payload["members"]] == [raw.member_id]
    assert payload["members"][0]["client_id"] == "raw-client" and payload["members"][0]["lag"] == 6
    rows = {(p["topic"], p["partition"]): (p["member_id"], p["committed"], p["lag"]) for p in payload["partitions"]}
    assert rows == {("events", 0): (raw.member_id, 4, 6), ("events", 1): (raw.member_id, None, None)}

    status = json.loads(invoked(invoke("status", "--json", bootstrap=bootstrap)))
    assert {"group": "live", "state": "Stable", "members": 1, "lag": 6} in status["group_summaries"]
    members = [m for m in status["group_members"] if m["group"] == "live"]
    assert [(m["member_id"], m["partitions"], m["lag"]) for m in members] == [(raw.member_id, 2, 6)]
    assert "group members" in invoked(invoke("status", bootstrap=bootstrap))


def test_reset_offsets_and_delete_are_refused_while_the_group_has_members(
    groups_cluster: Cluster, member: Callable[[str], RawMember]
) -> None:
    bootstrap = groups_cluster.bootstrap
    raw = member("busy")
    raw.join(["events"], [("events", 0)])
    raw.commit({("events", 0): 2})

    line = one_error_line(
        run_cli("group", "reset-offsets", "busy", "--all-topics", "--to-earliest", "--execute", bootstrap=bootstrap)
    )
    assert "has active members" in line and "stop them first" in line
    with Admin(bootstrap) as admin:
        with pytest.raises(UnknownMemberError):  # the node refuses an outside commit too
            admin.commit_group_offsets("busy", {TP("events", 0): 0})
        assert isinstance(admin.delete_groups(["busy"])["busy"], GroupNotEmptyError)
        assert admin.group_offsets("busy") == {TP("events", 0): 2}

    result = run_cli("group", "delete", "busy", "--yes", bootstrap=bootstrap)
    assert result.returncode == 1 and "NON_EMPTY_GROUP" in result.stderr.decode()

    raw.leave()
    raw.member_id = ""
    out = ok(
        run_cli("group", "reset-offsets", "busy", "--all-topics", "--to-earliest", "--execute", bootstrap=bootstrap)
    )
    assert "committed 1 offsets" in out
    with Admin(bootstrap) as admin:
        assert admin.group_offsets("busy") == {TP("events", 0): 0}


def test_reset_offsets_prints_a_dry_run_and_commits_only_with_execute(groups_cluster: Cluster) -> None:
    bootstrap = groups_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.commit_group_offsets("rewind", {TP("events", 0): 8, TP("events", 1): 3})

    plan = json.loads(
        ok(
            run_cli(
                "group", "reset-offsets", "rewind", "--all-topics", "--shift-by", "-5", "--json", bootstrap=bootstrap
            )
        )
    )
    assert plan["executed"] is False
    assert [(o["partition"], o["current"], o["new"]) for o in plan["offsets"]] == [(0, 8, 3), (1, 3, 0)]
    with Admin(bootstrap) as admin:
        assert admin.group_offsets("rewind") == {TP("events", 0): 8, TP("events", 1): 3}

    out = ok(
        run_cli(
            "group",
            "reset-offsets",
            "rewind",
            "--topic",
            "events:1",
            "--to-offset",
            "99",
            "--execute",
            bootstrap=bootstrap,
        )
    )
    assert "clamped from 99" in out
    ok(
        run_cli(
            "group",
            "reset-offsets",
            "rewind",
            "--topic",
            "events:0",
            "--to-datetime",
            "2000-01-01T00:00:00Z",
            "--execute",
            bootstrap=bootstrap,
        )
    )
    with Admin(bootstrap) as admin:
        assert admin.group_offsets("rewind") == {TP("events", 0): 0, TP("events", 1): 4}


def test_a_consumer_groups_member_is_described_and_its_offsets_can_be_reset_once_it_closed(
    groups_cluster: Cluster,
) -> None:
    bootstrap = groups_cluster.bootstrap
    consumer = Consumer(
        bootstrap, group_id="app", client_id="billing-app", session_timeout_s=10, heartbeat_interval_s=1
    )
    try:
        consumer.subscribe(["events"], start="earliest")
        read: set[tuple[int, int]] = set()
        deadline = time.monotonic() + 60
        while len(read) < 14:  # events holds 10 + 4 records
            assert time.monotonic() < deadline, f"the member read {len(read)} records"
            read |= {(r.partition, r.offset) for r in consumer.poll(0.2)}
        consumer.commit()
        payload = json.loads(invoked(invoke("group", "describe", "app", "--json", bootstrap=bootstrap)))
        assert payload["state"] == "Stable" and payload["lag"] == 0
        (described,) = payload["members"]
        assert (described["member_id"], described["client_id"]) == (consumer.member_id, "billing-app")
        assert [(p["partition"], p["committed"], p["member_id"]) for p in payload["partitions"]] == [
            (0, 10, consumer.member_id),
            (1, 4, consumer.member_id),
        ]
        refused = one_error_line(
            run_cli("group", "reset-offsets", "app", "--all-topics", "--to-earliest", bootstrap=bootstrap)
        )
        assert "has active members (1, state Stable)" in refused
    finally:
        consumer.close()  # leaves the group at once
    out = ok(
        run_cli("group", "reset-offsets", "app", "--all-topics", "--to-earliest", "--execute", bootstrap=bootstrap)
    )
    assert "committed 2 offsets" in out
    with Admin(bootstrap) as admin:
        assert admin.group_offsets("app") == {TP("events", 0): 0, TP("events", 1): 0}
        assert admin.describe_groups("app")["app"].state == "Empty"
