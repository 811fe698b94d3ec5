"""Consumer groups through the public Consumer on a real 3-node cluster: members share the partitions with
no overlap and together read every record, a member that closes hands its partitions over, and a member
whose session expired cannot commit.

Each consumer runs in a thread of the test process (a Consumer is used from one thread only).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from multiraft import Consumer, Producer, Record, TopicPartition
from multiraft.errors import MemberFencedError, UnknownMemberError
from multiraft.tools.launcher import cluster_down, cluster_up
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from tests.integration._helpers import FAST, FAST_GROUPS, Cluster

pytestmark = pytest.mark.integration

GROUP_SETTINGS = {**FAST_GROUPS, "group_initial_rebalance_delay_ms": 300}  # a starting fleet forms one generation
PARTITIONS = 6
PER_PARTITION = 50
WAIT_S = 90.0


@pytest.fixture(scope="module")
def groups_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    info = cluster_up(tmp_path_factory.mktemp("consumer-groups") / "cluster", 3, {**FAST, **GROUP_SETTINGS})
    cluster = Cluster(info, ClusterClient(info.bootstrap, request_timeout_s=30))
    try:
        yield cluster
    finally:
        cluster.client.close()
        cluster_down(info.directory)


def fill(cluster: Cluster, topic: str) -> set[tuple[int, int]]:
    """PER_PARTITION records in each partition; returns every (partition, offset) written."""
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    with Producer(cluster.bootstrap, linger_ms=5) as producer:
        futures = [
            producer.send(topic, b"%d-%d" % (p, i), partition=p)
            for p in range(PARTITIONS)
            for i in range(PER_PARTITION)
        ]
        producer.flush(60)
    return {(f.result().partition, f.result().offset) for f in futures}


class Ownership:
    """Who reads which partition, kept by the callbacks of every member: a partition assigned to one member
    while another still holds it is recorded as a violation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: dict[TopicPartition, str] = {}
        self.violations: list[str] = []

    def assigned(self, name: str, partitions: list[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                holder = self.owner.get(tp)
                if holder is not None and holder != name:
                    self.violations.append(f"{tp} assigned to {name} while {holder} holds it")
                self.owner[tp] = name

    def released(self, name: str, partitions: list[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                if self.owner.get(tp) == name:
                    del self.owner[tp]


class Member(threading.Thread):
    """A consumer polling in its own thread until told to stop (then it closes, leaving the group)."""

    def __init__(self, cluster: Cluster, group: str, topic: str, name: str, ownership: Ownership, **args: Any):
        super().__init__(name=f"member-{name}", daemon=True)
        self.cluster, self.group, self.topic, self.member_name = cluster, group, topic, name
        self.ownership, self.args = ownership, args
        self.stop = threading.Event()
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.records: list[Record] = []
        self.assignment: set[TopicPartition] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 4 * WAIT_S
        try:
            with Consumer(
                self.cluster.bootstrap,
                group_id=self.group,
                auto_offset_reset="earliest",
                heartbeat_interval_s=0.3,
                auto_commit_interval_s=0.5,
                client_id=self.member_name,
                **self.args,
            ) as consumer:
                consumer.subscribe(
                    self.topic,
                    on_assign=lambda c, tps: self.ownership.assigned(self.member_name, tps),
                    on_revoke=lambda c, tps: self.ownership.released(self.member_name, tps),
                )
                while not self.stop.is_set() and time.monotonic() < deadline:
                    records = consumer.poll(0.2)
                    with self.lock:
                        self.records += records
                        self.assignment = consumer.assignment()
        except BaseException as exc:
            self.error = exc
        finally:
            self.closed.set()

    def read(self) -> set[tuple[int, int]]:
        with self.lock:
            return {(r.partition, r.offset) for r in self.records}

    def owns(self) -> set[TopicPartition]:
        with self.lock:
            return set(self.assignment)


def wait_for(condition: Any, what: str, members: list[Member], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        errors = [m.error for m in members if m.error is not None]
        assert not errors, f"a member failed: {errors[0]!r}"
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {[sorted(m.owns()) for m in members]}")


def stop_all(members: list[Member]) -> None:
    for member in members:
        member.stop.set()
    for member in members:
        member.join(60)


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_three_consumers_share_six_partitions_with_no_overlap_and_a_closing_one_hands_them_over(
    groups_cluster: Cluster, strategy: str
) -> None:
    topic = f"shared-{strategy}"
    written = fill(groups_cluster, topic)
    ownership = Ownership()
    members = [
        Member(
            groups_cluster,
            f"sharing-{strategy}",
            topic,
            name,
            ownership,
            session_timeout_s=60.0,
            partition_assignment_strategy=strategy,
        )
        for name in "abc"
    ]
    for member in members:
        member.start()
    try:
        everything = {TopicPartition(topic, p) for p in range(PARTITIONS)}

        def spread(group: list[Member], each: int) -> bool:
            owned = [m.owns() for m in group]
            return all(len(o) == each for o in owned) and set().union(*owned) == everything

        wait_for(lambda: spread(members, 2), "2 partitions per member", members)
        wait_for(lambda: set().union(*(m.read() for m in members)) >= written, "every record read", members)
        owned = [m.owns() for m in members]
        assert sum(len(o) for o in owned) == PARTITIONS  # no partition read by two members
        assert ownership.violations == []

        # A member that closes leaves at once: the others take its partitions well before its 60 s session ends.
        leaving, staying = members[0], members[1:]
        leaving.stop.set()
        assert leaving.closed.wait(60)
        wait_for(lambda: spread(staying, 3), "3 partitions per remaining member", staying, timeout_s=40)
        assert ownership.violations == []
        assert leaving.error is None
    finally:
        stop_all(members)


def _describe(cluster: Cluster, group: str) -> pb.GroupDescription:
    address = cluster.info.nodes[1].client_address
    stub = pb_grpc.GroupsStub(cluster.client.channel(address))
    (description,) = stub.DescribeGroups(pb.DescribeGroupsRequest(groups=[group]), timeout=30).groups
    return description


def test_a_commit_from_a_consumer_whose_session_expired_is_refused(groups_cluster: Cluster) -> None:
    fill(groups_cluster, "expiring")
    with Consumer(
        groups_cluster.bootstrap,
        group_id="expiring-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_s=2.0,
        heartbeat_interval_s=0.3,
    ) as consumer:
        consumer.subscribe("expiring")
        deadline = time.monotonic() + WAIT_S
        records: list[Record] = []
        while len(consumer.assignment()) < PARTITIONS or not records:
            assert time.monotonic() < deadline, "the consumer never got the partitions"
            records += consumer.poll(0.2)
        consumer.commit()
        member_id = consumer.member_id
        assert member_id and consumer.generation >= 1

        # The process stalls (no heartbeats, as a paused process): the coordinator ends its session.
        assert consumer._heartbeat is not None
        consumer._heartbeat.stop()
        deadline = time.monotonic() + WAIT_S
        while member_id in {m.member_id for m in _describe(groups_cluster, "expiring-group").members}:
            assert time.monotonic() < deadline, "the session never expired"
            time.sleep(0.2)

        tp = TopicPartition("expiring", 0)
        before = consumer.committed([tp])[tp]
        with pytest.raises(UnknownMemberError) as refused:
            consumer.commit({tp: PER_PARTITION})
        assert isinstance(refused.value, MemberFencedError)
        assert consumer.committed([tp])[tp] == before


def test_closing_a_member_commits_its_positions_as_the_member_before_it_leaves(groups_cluster: Cluster) -> None:
    written = fill(groups_cluster, "closing")
    revoked: list[TopicPartition] = []
    with Consumer(groups_cluster.bootstrap, group_id="closing-group", auto_offset_reset="earliest") as consumer:
        consumer.subscribe("closing", on_revoke=lambda c, tps: revoked.extend(tps))
        deadline = time.monotonic() + WAIT_S
        read: set[tuple[int, int]] = set()
        while read < written:
            assert time.monotonic() < deadline, "the member never read every record"
            read |= {(r.partition, r.offset) for r in consumer.poll(0.2)}
    assert sorted(revoked) == [TopicPartition("closing", p) for p in range(PARTITIONS)]
    assert _describe(groups_cluster, "closing-group").members == []  # left at once
    assert not [t for t in threading.enumerate() if t.name == "multiraft-heartbeat-closing-group"]
    with Consumer(groups_cluster.bootstrap, group_id="closing-group") as check:
        committed = check.committed([TopicPartition("closing", p) for p in range(PARTITIONS)])
    assert set(committed.values()) == {PER_PARTITION}


def _poll_until(consumer: Consumer, condition: Any, what: str) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {sorted(consumer.assignment())}"
        records += consumer.poll(0.2)
    return records


def test_a_pattern_subscription_picks_up_a_matching_topic_created_later(groups_cluster: Cluster) -> None:
    fill(groups_cluster, "pattern-a")
    groups_cluster.create_topic("unrelated", partitions=1, replication_factor=3)
    with (
        Consumer(groups_cluster.bootstrap, group_id="patterns", metadata_max_age_s=0.5) as member,
        Consumer(groups_cluster.bootstrap, metadata_max_age_s=0.5) as loner,
    ):
        member.subscribe(re.compile(r"pattern-.*"))
        loner.subscribe(re.compile(r"pattern-.*"))
        a = {TopicPartition("pattern-a", p) for p in range(PARTITIONS)}
        _poll_until(member, lambda: member.assignment() == a, "the group's first topic")
        _poll_until(loner, lambda: loner.assignment() == a, "the loner's first topic")
        groups_cluster.create_topic("pattern-b", partitions=2, replication_factor=3)
        both = a | {TopicPartition("pattern-b", 0), TopicPartition("pattern-b", 1)}
        _poll_until(member, lambda: member.assignment() == both, "the topic created later, in the group")
        _poll_until(loner, lambda: loner.assignment() == both, "the topic created later, without a group")


def test_a_static_member_that_restarts_within_its_session_gets_its_partitions_back_with_no_rebalance(
    groups_cluster: Cluster,
) -> None:
    fill(groups_cluster, "static")
    settings: dict[str, Any] = {"group_id": "statics", "session_timeout_s": 30.0, "heartbeat_interval_s": 0.3}
    with Consumer(groups_cluster.bootstrap, **settings) as other:
        other.subscribe("static")
        first = Consumer(groups_cluster.bootstrap, group_instance_id="instance-1", **settings)
        first.subscribe("static")
        deadline = time.monotonic() + WAIT_S
        while not (len(first.assignment()) == 3 and len(other.assignment()) == 3):
            assert time.monotonic() < deadline, "the group never spread its partitions"
            first.poll(0.1)
            other.poll(0.1)
        had, generation, others = first.assignment(), first.generation, other.assignment()
        first.close()  # a static member does not leave
        assert len(_describe(groups_cluster, "statics").members) == 2
        with Consumer(groups_cluster.bootstrap, group_instance_id="instance-1", **settings) as restarted:
            restarted.subscribe("static")
            _poll_until(restarted, lambda: restarted.assignment() == had, "the restarted member's partitions")
            assert restarted.generation == generation
            for _ in range(5):
                other.poll(0.1)
            assert other.assignment() == others and other.generation == generation


def test_a_member_that_stops_polling_leaves_after_max_poll_interval_and_rejoins_at_its_next_poll(
    groups_cluster: Cluster,
) -> None:
    fill(groups_cluster, "slow")
    lost: list[TopicPartition] = []
    settings: dict[str, Any] = {"group_id": "slow-group", "heartbeat_interval_s": 0.3}
    with (
        Consumer(groups_cluster.bootstrap, max_poll_interval_s=2.0, **settings) as slow,
        Consumer(groups_cluster.bootstrap, **settings) as busy,
    ):
        slow.subscribe("slow", on_lost=lambda c, tps: lost.extend(tps))
        busy.subscribe("slow")
        deadline = time.monotonic() + WAIT_S
        while not (len(slow.assignment()) == 3 and len(busy.assignment()) == 3):
            assert time.monotonic() < deadline, "the group never spread its partitions"
            slow.poll(0.1)
            busy.poll(0.1)
        had = slow.assignment()
        # slow stops calling poll(): its heartbeat thread leaves the group, and busy gets every partition.
        _poll_until(busy, lambda: len(busy.assignment()) == PARTITIONS, "busy to take over every partition")
        _poll_until(slow, lambda: sorted(lost) == sorted(had), "slow to learn it lost its partitions")
        deadline = time.monotonic() + WAIT_S
        while not (len(slow.assignment()) == 3 and len(busy.assignment()) == 3):  # both rejoin
            assert time.monotonic() < deadline, "slow never rejoined"
            slow.poll(0.1)
            busy.poll(0.1)


def _describe_on(cluster: Cluster, node_id: int, group: str) -> pb.GroupDescription:
    stub = pb_grpc.GroupsStub(cluster.client.channel(cluster.info.nodes[node_id].client_address))
    (description,) = stub.DescribeGroups(pb.DescribeGroupsRequest(groups=[group]), timeout=30).groups
    return description


def test_members_keep_their_partitions_and_commit_when_the_coordinator_fails_over(groups_cluster: Cluster) -> None:
    fill(groups_cluster, "failover")
    settings: dict[str, Any] = {
        "group_id": "failover-group",
        "session_timeout_s": 20.0,
        "heartbeat_interval_s": 0.3,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
    }
    with Consumer(groups_cluster.bootstrap, **settings) as a, Consumer(groups_cluster.bootstrap, **settings) as b:
        a.subscribe("failover")
        b.subscribe("failover")
        deadline = time.monotonic() + WAIT_S
        while not (len(a.assignment()) == 3 and len(b.assignment()) == 3):
            assert time.monotonic() < deadline, "the group never spread its partitions"
            a.poll(0.1)
            b.poll(0.1)
        owned, generation = (a.assignment(), b.assignment()), a.generation
        coordinator = _describe_on(groups_cluster, 1, "failover-group").coordinator_id
        groups_cluster.kill(coordinator)
        try:
            survivor = next(n for n in groups_cluster.info.nodes if n != coordinator)
            deadline = time.monotonic() + WAIT_S
            while True:  # both keep polling (and heartbeating) while the coordinator moves
                a.poll(0.1)
                b.poll(0.1)
                described = _describe_on(groups_cluster, survivor, "failover-group")
                if not described.HasField("error") and described.coordinator_id not in (0, coordinator):
                    break
                assert time.monotonic() < deadline, "no new coordinator took the group over"
            for _ in range(10):
                a.poll(0.1)
                b.poll(0.1)
            assert (a.assignment(), b.assignment()) == owned
            assert a.generation == b.generation == generation
            a.commit()
            b.commit()
        finally:
            groups_cluster.start(coordinator)
