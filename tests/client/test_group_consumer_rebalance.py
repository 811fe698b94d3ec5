"""A Consumer's side of rebalances (rpc.client._consumer_group.Rebalancer) with its membership served by the
in-process coordinator: partitions appear and go with the assignment, revoked positions are auto-committed
before on_revoke runs, close() commits as the member and leaves, and auto-commit waits out a sync."""

from __future__ import annotations

from multiraft import Consumer
from rpc.client._consumer_group import Rebalancer
from rpc.client._consumer_group_member import GroupMembership, Phase
from rpc.client._consumer_group_settings import MemberSettings
from rpc.client._records import TopicPartition
from tests.client._fake_group import Clock, FakeCoordinator, Member, Recorder, new_member, settle


def member_consumer(coordinator: FakeCoordinator, clock: Clock) -> tuple[Consumer, list[tuple[str, object]]]:
    """A Consumer (never connected) whose membership talks to ``coordinator``; callbacks are recorded."""
    consumer = Consumer("127.0.0.1:1", group_id="g")
    events: list[tuple[str, object]] = []
    listener = Rebalancer(consumer, auto_commit=True)
    listener.on_assign = lambda c, tps: events.append(("assign", tps))
    listener.on_revoke = lambda c, tps: events.append(("revoke", {tp: coordinator.offsets.get(tp) for tp in tps}))
    settings = MemberSettings("g", session_timeout_s=10.0, heartbeat_interval_s=1.0, client_id="c")
    membership = GroupMembership(settings, coordinator, listener, coordinator.topics, clock=clock)
    consumer._membership = membership
    consumer._listener = listener
    membership.subscribe(("t",))
    return consumer, events


def test_revoked_positions_are_committed_before_on_revoke_and_close_commits_the_rest_and_leaves() -> None:
    coordinator, clock = FakeCoordinator({"t": 4}), Clock()
    consumer, events = member_consumer(coordinator, clock)
    assert consumer._membership is not None
    consumer._membership.poll()
    every = [TopicPartition("t", p) for p in range(4)]
    assert sorted(consumer.assignment()) == every and events == [("assign", every)]
    for tp in every:
        consumer.seek(tp, 5)
    other = new_member(coordinator, clock)
    other.membership.poll()
    consumer._membership.beat()
    consumer._membership.poll()
    kind, committed = events[1]
    assert kind == "revoke" and set(committed.values()) == {5}  # type: ignore[union-attr]
    kept = consumer.assignment()
    assert len(kept) == 2 and not kept & set(committed)  # type: ignore[arg-type]
    consumer.close()
    assert events[-1] == ("revoke", dict.fromkeys(sorted(kept), 5))  # committed before on_revoke ran
    assert {tp: coordinator.offsets[tp] for tp in every} == dict.fromkeys(every, 5)
    assert coordinator.calls[-1] == "leave"
    settle(coordinator, [other])
    assert other.recorder.held == set(every)


def test_auto_commit_waits_while_the_member_waits_for_its_new_assignment() -> None:
    coordinator, clock = FakeCoordinator({"t": 4}), Clock()
    leader = new_member(coordinator, clock)
    settle(coordinator, [leader])
    consumer, _ = member_consumer(coordinator, clock)
    membership = consumer._membership
    assert membership is not None
    settle(coordinator, [leader, Member(membership, Recorder())])
    newcomer = new_member(coordinator, clock)
    newcomer.membership.poll()  # parks: a rebalance begins
    leader.membership.beat()
    leader.membership.poll()  # the leader rejoins and parks
    membership.beat()
    membership.poll()  # the consumer rejoins last: the generation forms, and it syncs before the leader did
    assert membership.phase is Phase.SYNCING
    for tp in consumer.assignment():
        consumer.seek(tp, 3)
    consumer._next_auto_commit = 0.0
    consumer._maybe_auto_commit()
    assert "commit" not in coordinator.calls  # not sent: the coordinator would refuse it
    leader.membership.poll()  # the leader assigns
    membership.poll()  # assigned (and, having revoked a partition for the newcomer, rejoining at once)
    assert membership.phase is not Phase.SYNCING
    consumer._maybe_auto_commit()
    assert "commit" in coordinator.calls
    consumer.close()


def test_lost_partitions_go_to_on_revoke_when_there_is_no_on_lost_and_are_not_committed() -> None:
    coordinator, clock = FakeCoordinator({"t": 2}), Clock()
    consumer, events = member_consumer(coordinator, clock)
    membership = consumer._membership
    assert membership is not None
    membership.poll()
    for tp in consumer.assignment():
        consumer.seek(tp, 4)
    coordinator.advance(10_001)  # the session expired
    membership.beat()
    membership.poll()
    every = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert ("revoke", dict.fromkeys(every)) in events  # run as on_lost; nothing committed for them
    assert "commit" not in coordinator.calls
    assert sorted(consumer.assignment()) == every  # joined again as a new member
    consumer.close()
