"""The consumer's group membership (rpc.client._consumer_group_member) against the real coordinator state machine,
in process (tests/client/_fake_group.py): joining, assignment by the leader, cooperative and eager
rebalances, callbacks, fencing of commits, the heartbeat thread, leaving, static members."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.consumer_groups import GroupState, JoinReply, JoinRequest
from multiraft.errors import (
    ConfigError,
    InstanceFencedError,
    MemberFencedError,
    StaleGenerationError,
    UnknownMemberError,
)
from rpc.client._consumer_group_heartbeat import HeartbeatThread
from rpc.client._consumer_group_member import GroupMembership, Phase
from rpc.client._consumer_group_settings import MemberSettings
from rpc.client._records import TopicPartition
from tests.client._fake_group import (
    Clock,
    FakeCoordinator,
    Member,
    Recorder,
    assert_no_partition_read_twice,
    new_member,
    settle,
)

TOPIC = "t"


def everything(count: int) -> set[TopicPartition]:
    return {TopicPartition(TOPIC, p) for p in range(count)}


def test_a_first_join_is_answered_with_a_member_id_and_the_member_joins_again_with_it() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    member = new_member(coordinator, clock)
    member.membership.poll()
    assert coordinator.calls[:3] == ["join", "join", "sync"]
    assert member.membership.member_id.startswith("c-")
    assert member.membership.generation == 1
    assert member.membership.phase is Phase.STABLE
    assert member.recorder.held == everything(4)
    assert member.recorder.events == [("assign", sorted(everything(4)))]


def test_the_leader_assigns_and_each_follower_receives_only_its_own_partitions() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 6}), Clock()
    members = [new_member(coordinator, clock, strategy=("range",)) for _ in range(3)]
    settle(coordinator, members)
    held = [m.recorder.held for m in members]
    assert all(len(h) == 2 for h in held)
    assert set().union(*held) == everything(6)
    generation = members[0].membership.generation
    assert {m.membership.generation for m in members} == {generation}
    assert coordinator.handed_out[generation] == {
        m.membership.member_id: frozenset((tp.topic, tp.partition) for tp in m.recorder.held) for m in members
    }


def test_a_cooperative_rebalance_revokes_only_the_partitions_that_move_and_keeps_reading_the_rest() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 6}), Clock()
    first = new_member(coordinator, clock)
    settle(coordinator, [first])
    assert first.recorder.held == everything(6)
    first.recorder.events.clear()
    second = new_member(coordinator, clock)
    settle(coordinator, [first, second])
    revoked = [tps for kind, tps in first.recorder.events if kind == "revoke"]
    assert len(revoked) == 1 and len(revoked[0]) == 3  # three move, three stay: never revoked
    assert ("lost", revoked[0]) not in first.recorder.events
    assert first.recorder.held == everything(6) - set(revoked[0])
    assert second.recorder.held == set(revoked[0])


def test_a_cooperative_member_reads_its_kept_partitions_while_the_group_rebalances() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    first, second = new_member(coordinator, clock), new_member(coordinator, clock)
    settle(coordinator, [first, second])
    kept, events = set(first.recorder.held), list(first.recorder.events)
    third = new_member(coordinator, clock)
    third.membership.poll()  # its join parks until the others rejoin
    first.membership.beat()  # REBALANCE_IN_PROGRESS
    first.membership.poll()  # rejoins with what it owns; parks until the second member rejoins too
    assert first.membership.phase is Phase.JOINING
    assert first.recorder.held == kept  # nothing revoked before the new assignment says so
    assert first.recorder.events == events
    settle(coordinator, [first, second, third])


def test_an_eager_member_revokes_everything_before_it_joins_again() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    first = new_member(coordinator, clock, strategy=("range",))
    settle(coordinator, [first])
    second = new_member(coordinator, clock, strategy=("range",))
    second.membership.poll()
    first.membership.beat()
    first.membership.poll()
    assert first.recorder.events[:3] == [
        ("assign", sorted(everything(4))),
        ("revoke", sorted(everything(4))),  # all of them, before its JoinGroup
        ("assign", sorted(first.recorder.held)),
    ]
    settle(coordinator, [first, second])
    assert len(first.recorder.held) == 2 and len(second.recorder.held) == 2


def test_on_revoke_runs_before_on_assign_and_may_commit_the_revoked_partitions() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    first = new_member(coordinator, clock, commit_on_revoke=True)
    settle(coordinator, [first])
    second = new_member(coordinator, clock)
    settle(coordinator, [first, second])
    kinds = [kind for kind, _ in first.recorder.events]
    assert kinds[:3] == ["assign", "revoke", "assign"]
    assert first.recorder.commit_errors == []
    revoked = first.recorder.events[1][1]
    assert {tp: coordinator.offsets[tp] for tp in revoked} == dict.fromkeys(revoked, 7)


def test_a_commit_from_a_member_whose_session_expired_raises_the_precise_error_and_loses_its_partitions() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 2}), Clock()
    zombie = new_member(coordinator, clock)
    settle(coordinator, [zombie])
    coordinator.advance(10_001)  # the session timed out: the coordinator dropped it
    with pytest.raises(UnknownMemberError):
        zombie.membership.commit({TopicPartition(TOPIC, 0): 5})
    assert TopicPartition(TOPIC, 0) not in coordinator.offsets
    zombie.membership.poll()  # on_lost, then a fresh member id
    assert ("lost", sorted(everything(2))) in zombie.recorder.events
    assert ("revoke", sorted(everything(2))) not in zombie.recorder.events
    settle(coordinator, [zombie])
    assert zombie.recorder.held == everything(2)


def test_a_commit_of_a_stale_generation_is_refused() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 2}), Clock()
    member = new_member(coordinator, clock)
    settle(coordinator, [member])
    member.membership._generation = 0  # as if it missed a rebalance
    with pytest.raises(StaleGenerationError) as refused:
        member.membership.commit({TopicPartition(TOPIC, 0): 5})
    assert isinstance(refused.value, MemberFencedError)


def test_a_heartbeat_that_finds_the_membership_gone_makes_the_next_poll_run_on_lost_and_rejoin() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 2}), Clock()
    member = new_member(coordinator, clock)
    settle(coordinator, [member])
    old_id = member.membership.member_id
    coordinator.advance(10_001)
    member.membership.beat()
    assert member.recorder.held == everything(2)  # the heartbeat thread touches no partition
    member.membership.poll()
    assert ("lost", sorted(everything(2))) in member.recorder.events
    assert member.membership.member_id != old_id
    assert member.recorder.held == everything(2)


def test_past_max_poll_interval_the_heartbeat_leaves_the_group_and_the_next_poll_rejoins() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    slow = new_member(coordinator, clock, max_poll_interval_s=5.0)
    other = new_member(coordinator, clock, max_poll_interval_s=300.0)
    settle(coordinator, [slow, other])
    had = sorted(slow.recorder.held)
    clock.now += 6.0  # slow stops calling poll()
    slow.membership.beat()
    assert coordinator.calls[-1] == "leave"
    assert slow.membership.member_id not in coordinator.group.member_ids
    settle(coordinator, [other])
    assert other.recorder.held == everything(4)
    slow.membership.poll()  # comes back: its partitions were lost, it joins as a new member
    assert slow.recorder.events[-1] == ("lost", had)
    settle(coordinator, [slow, other])
    assert len(slow.recorder.held) == 2 and len(other.recorder.held) == 2


def test_the_heartbeat_thread_beats_until_stopped() -> None:
    beats: list[int] = []
    done = threading.Event()

    def beat() -> float:
        beats.append(1)
        if len(beats) == 3:
            done.set()
        return 0.001

    thread = HeartbeatThread(beat, name="test-heartbeat")
    thread.start()
    assert done.wait(30)
    thread.stop()
    assert not thread.alive


def test_close_revokes_and_leaves_at_once_so_the_others_take_over() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    leaving, staying = new_member(coordinator, clock), new_member(coordinator, clock)
    settle(coordinator, [leaving, staying])
    had = sorted(leaving.recorder.held)
    leaving.membership.close()
    leaving.alive = False
    assert leaving.recorder.events[-1] == ("revoke", had)
    assert coordinator.calls[-1] == "leave"
    settle(coordinator, [staying])
    assert staying.recorder.held == everything(4)


def test_a_static_member_does_not_leave_on_close_and_gets_its_partitions_back_with_no_rebalance() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    static = new_member(coordinator, clock, instance_id="i-1")
    other = new_member(coordinator, clock)
    settle(coordinator, [static, other])
    had, generation = set(static.recorder.held), coordinator.group.generation
    static.membership.close()
    assert "leave" not in coordinator.calls
    assert coordinator.group.member_of_instance("i-1") is not None
    restarted = new_member(coordinator, clock, instance_id="i-1")
    restarted.membership.poll()
    assert restarted.recorder.held == had
    assert coordinator.group.generation == generation
    assert coordinator.group.state is GroupState.STABLE


def test_a_static_member_replaced_by_a_newer_process_is_fenced_for_good() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 2}), Clock()
    old = new_member(coordinator, clock, instance_id="i-1")
    settle(coordinator, [old])
    new = new_member(coordinator, clock, instance_id="i-1")
    new.membership.poll()
    old.membership.beat()
    with pytest.raises(InstanceFencedError):
        old.membership.poll()
    assert ("lost", sorted(everything(2))) in old.recorder.events
    with pytest.raises(InstanceFencedError):
        old.membership.poll()


def test_a_retriable_join_failure_backs_off_and_joins_again() -> None:
    from multiraft.errors import CoordinatorMovedError

    class MovingCoordinator(FakeCoordinator):
        failures = 1

        def join(self, request: JoinRequest) -> Future[JoinReply]:
            if self.failures:
                self.failures -= 1
                future: Future[JoinReply] = Future()
                future.set_exception(CoordinatorMovedError("moved"))
                return future
            return super().join(request)

    coordinator, clock = MovingCoordinator({TOPIC: 2}), Clock()
    member = new_member(coordinator, clock)
    member.membership.poll()
    assert member.membership.phase is Phase.UNJOINED
    member.membership.poll()  # still backing off
    assert coordinator.calls == []
    clock.now = member.membership.retry_at
    member.membership.poll()
    assert member.recorder.held == everything(2)


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("session_timeout_s", 0),
        ("heartbeat_interval_s", 50.0),
        ("max_poll_interval_s", -1),
        ("partition_assignment_strategy", ("fastest",)),
        ("group_instance_id", ""),
        ("client_rack", ""),
    ],
)
def test_wrong_membership_settings_name_the_argument(argument: str, value: object) -> None:
    settings = MemberSettings("g", **{argument: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as refused:
        settings.validate()
    assert refused.value.field == argument


def test_only_all_cooperative_assignors_rebalance_cooperatively() -> None:
    assert MemberSettings("g").cooperative
    assert not MemberSettings("g", partition_assignment_strategy=("cooperative-sticky", "range")).cooperative


# ------------------------------------------------------------------------------------------- invariant


@settings(max_examples=40, deadline=None)
@given(
    strategy=st.sampled_from(["cooperative-sticky", "sticky", "range", "roundrobin"]),
    steps=st.lists(st.sampled_from(["add", "close", "expire", "poll"]), min_size=1, max_size=10),
    partitions=st.integers(1, 7),
)
def test_random_joins_and_leaves_never_let_two_members_read_one_partition_and_settle_on_every_partition(
    strategy: str, steps: list[str], partitions: int
) -> None:
    coordinator, clock = FakeCoordinator({TOPIC: partitions}), Clock()
    members: list[Member] = []
    for step in steps:
        live = [m for m in members if m.alive]
        if step == "add" or not live:
            members.append(new_member(coordinator, clock, strategy=(strategy,)))
        elif step == "close":
            live[0].membership.close()
            live[0].alive = False
        elif step == "expire":  # the member's process stops: no more polls or heartbeats
            live[-1].alive = False
            live[-1].recorder.held.clear()
            coordinator.advance(10_001)
        for member in (m for m in members if m.alive):
            member.membership.poll()
            assert_no_partition_read_twice([m for m in members if m.alive])
            member.membership.beat()
    live = [m for m in members if m.alive] or [new_member(coordinator, clock, strategy=(strategy,))]
    settle(coordinator, live, rounds=40)
    held = [m.recorder.held for m in live]
    assert sum(len(h) for h in held) == partitions
    assert set().union(*held) == everything(partitions)
    for generation, plan in coordinator.handed_out.items():
        owned = [tp for parts in plan.values() for tp in parts]
        assert len(owned) == len(set(owned)), f"generation {generation} gave a partition twice"


def test_membership_rejects_wrong_settings_before_it_starts() -> None:
    with pytest.raises(ConfigError):
        GroupMembership(MemberSettings("g", session_timeout_s=-1), FakeCoordinator({}), Recorder(), dict)


def test_an_exception_in_on_revoke_reaches_the_caller_after_the_new_assignment_is_in_place() -> None:
    class CallbackFailedError(RuntimeError):
        pass

    coordinator, clock = FakeCoordinator({TOPIC: 4}), Clock()
    first = new_member(coordinator, clock)
    settle(coordinator, [first])
    original = first.recorder.revoking

    def revoking(partitions: list[TopicPartition]) -> None:
        original(partitions)
        raise CallbackFailedError("the application's on_revoke failed")

    first.recorder.revoking = revoking  # type: ignore[method-assign]
    second = new_member(coordinator, clock)
    second.membership.poll()
    first.membership.beat()
    with pytest.raises(CallbackFailedError):
        first.membership.poll()
    assert first.recorder.events[-1][0] == "assign"
    assert first.membership.owned == {tuple(tp) for tp in first.recorder.held}
    first.recorder.revoking = original  # type: ignore[method-assign]
    settle(coordinator, [first, second])
    assert len(first.recorder.held) == 2 and len(second.recorder.held) == 2


def test_topic_racks_come_from_the_replicas_nodes_and_leave_unknown_racks_out() -> None:
    from rpc.client._consumer_group_member import topic_racks

    racks = topic_racks({"t": [[1, 2], [3]]}, {1: "eu-1a", 2: "eu-1b"})
    assert racks == {"t": (frozenset({"eu-1a", "eu-1b"}), frozenset())}


def test_the_leader_rejoins_when_a_subscribed_topic_gains_partitions_and_assigns_them() -> None:
    coordinator, clock = FakeCoordinator({TOPIC: 2}), Clock()
    leader, follower = new_member(coordinator, clock), new_member(coordinator, clock)
    settle(coordinator, [leader, follower])
    coordinator.partitions[TOPIC] = 4
    clock.now += 31.0  # past metadata_max_age_s
    settle(coordinator, [leader, follower])
    assert leader.recorder.held | follower.recorder.held == everything(4)
    assert len(leader.recorder.held) == len(follower.recorder.held) == 2


def test_a_pattern_subscription_rejoins_when_its_matches_change() -> None:
    import re

    coordinator, clock = FakeCoordinator({"orders-1": 1, "other": 1}), Clock()
    member = new_member(coordinator, clock)
    member.membership.subscribe(re.compile(r"orders-.*"))
    settle(coordinator, [member])
    assert member.recorder.held == {TopicPartition("orders-1", 0)}
    coordinator.partitions["orders-2"] = 1
    clock.now += 31.0
    settle(coordinator, [member])
    assert member.recorder.held == {TopicPartition("orders-1", 0), TopicPartition("orders-2", 0)}


def test_a_subscription_survives_its_trip_through_the_wire_format() -> None:
    from multiraft.consumer_groups import Subscription
    from rpc.client._consumer_group_link import subscription_from_proto, subscription_to_proto

    for subscription in (
        Subscription(("a", "b"), frozenset({("a", 1), ("b", 0)}), 4, "rack-1", b"x"),
        Subscription(("a",)),
    ):
        assert subscription_from_proto(subscription_to_proto(subscription)) == subscription


def test_a_leader_that_cannot_read_metadata_joins_again_and_assigns_once_it_can() -> None:
    from multiraft.errors import UnavailableError

    coordinator, clock = FakeCoordinator({TOPIC: 2}), Clock()
    failures = [UnavailableError("no node answered")] * 2  # the subscription's check, then the assignment

    def topics() -> dict[str, tuple[frozenset[str], ...]]:
        if failures:
            raise failures.pop()
        return coordinator.topics()

    recorder = Recorder()
    settings = MemberSettings("g", session_timeout_s=10.0, heartbeat_interval_s=1.0, client_id="c")
    membership = GroupMembership(settings, coordinator, recorder, topics, clock=clock)
    membership.subscribe((TOPIC,))
    membership.poll()
    assert membership.phase is Phase.UNJOINED and recorder.held == set()
    clock.now = membership.retry_at
    membership.poll()
    assert membership.phase is Phase.STABLE and recorder.held == everything(2)
