"""The consumer-group coordinator's behaviour, as the issue states it, with Kafka-like simulated consumers."""

from __future__ import annotations

import pytest

from multiraft.consumer_groups import (
    FencedInstanceIdError,
    GroupCoordinator,
    GroupMetadataRecord,
    GroupState,
    HeartbeatRequest,
    IllegalGenerationError,
    PartitionNotOwnedError,
    UnknownMemberIdError,
    check_offset_commit,
)

from ._harness import SESSION_MS, Group, counter_ids

ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")


def _owners(group: Group) -> dict[tuple[str, int], list[str]]:
    owners: dict[tuple[str, int], list[str]] = {}
    for c in group.consumers.values():
        for tp in c.owned:
            owners.setdefault(tp, []).append(c.name)
    return owners


@pytest.mark.parametrize("protocol", ASSIGNORS)
def test_three_members_share_six_partitions_with_no_overlap(protocol: str) -> None:
    group = Group({"orders": 6})
    for name in ("a", "b", "c"):
        group.add(name, protocol)
    group.settle()
    assert sorted(len(c.owned) for c in group.consumers.values()) == [2, 2, 2]
    assert all(len(names) == 1 for names in _owners(group).values())
    assert len(_owners(group)) == 6
    assert group.coordinator.state is GroupState.STABLE


def test_the_first_generation_waits_for_a_starting_fleet_instead_of_rebalancing_per_member() -> None:
    from multiraft.consumer_groups import GroupSettings

    group = Group({"orders": 6}, settings=GroupSettings(initial_rebalance_delay_ms=3_000))
    for name in ("a", "b", "c"):
        group.add(name, "range")
        group.advance(1_000)
    group.settle()
    assert group.coordinator.generation == 1  # one rebalance for the three of them


@pytest.mark.parametrize("protocol", ASSIGNORS)
def test_a_member_that_stops_heartbeating_loses_its_partitions_after_its_session_timeout(protocol: str) -> None:
    group = Group({"orders": 6})
    a, b, c = (group.add(name, protocol) for name in ("a", "b", "c"))
    group.settle()
    generation = group.coordinator.generation
    group.crash(c)
    group.advance(SESSION_MS - 2_000)
    assert group.coordinator.generation == generation  # still within its session: nothing moves
    assert c.member_id in group.coordinator.member_ids
    group.advance(2_000)
    assert c.member_id not in group.coordinator.member_ids
    group.settle()
    assert sorted(len(x.owned) for x in (a, b)) == [3, 3]
    assert a.owned | b.owned == {("orders", p) for p in range(6)}


@pytest.mark.parametrize("protocol", ASSIGNORS)
def test_members_joining_and_leaving_one_by_one_never_own_a_partition_twice_in_a_generation(protocol: str) -> None:
    group = Group({"orders": 6, "events": 3})
    names = iter(f"m{i}" for i in range(100))
    for _ in range(4):
        group.add(next(names), protocol)
        group.settle()
    for step in range(6):
        if step % 2:
            group.leave(next(iter(group.consumers.values())))
        else:
            group.add(next(names), protocol)
        for _ in range(40):
            group.advance(500)
            assert all(len(owners) == 1 for owners in _owners(group).values()), group.describe()
        group.settle()
    for generation, assignments in group.handed_out.items():
        seen = [tp for parts in assignments.values() for tp in parts]
        assert len(seen) == len(set(seen)), generation


def test_a_cooperative_rebalance_revokes_only_the_partitions_that_move() -> None:
    group = Group({"orders": 6})
    a, b = group.add("a"), group.add("b")
    group.settle()
    before = {a.name: a.owned, b.name: b.owned}
    revoked_before = {a.name: len(a.revocations), b.name: len(b.revocations)}
    c = group.add("c")
    group.settle()
    for member in (a, b):
        assert member.owned <= before[member.name]  # kept the rest, gave up only what moved to c
        revoked = member.revocations[revoked_before[member.name] :]
        assert len(revoked) == 1 and len(revoked[0]) == 1
    assert len(c.owned) == 2


def test_an_eager_rebalance_revokes_everything_before_rejoining() -> None:
    group = Group({"orders": 6})
    a, b = group.add("a", "range"), group.add("b", "range")
    group.settle()
    revoked_before = len(a.revocations), len(b.revocations)
    group.add("c", "range")
    group.settle()
    assert [len(r) for r in a.revocations[revoked_before[0] :] + b.revocations[revoked_before[1] :]] == [3, 3]


def test_a_member_that_comes_back_after_a_pause_cannot_commit() -> None:
    group = Group({"orders": 6})
    a, b, c = (group.add(name) for name in ("a", "b", "c"))
    group.settle()
    held = c.owned
    group.advance(SESSION_MS + 1_000, paused=frozenset({"c"}))  # SIGSTOP: no heartbeats
    error = group.can_commit(c, held)
    assert isinstance(error, UnknownMemberIdError)
    # Nor may it commit once the others moved on: its partitions belong to a and b now.
    group.consumers.pop("c")
    group.settle()
    assert isinstance(group.can_commit(c, held), UnknownMemberIdError)
    assert group.can_commit(a) is None and group.can_commit(b) is None


def test_a_member_that_missed_a_rebalance_gets_illegal_generation_and_a_foreign_partition_is_refused() -> None:
    group = Group({"orders": 4})
    a, b = group.add("a", "range"), group.add("b", "range")
    group.settle()
    stale = a.generation
    group.add("c", "range")
    group.settle()
    with pytest.raises(IllegalGenerationError):
        check_offset_commit(group.coordinator, a.member_id, stale, a.owned)
    foreign = next(iter(b.owned))
    with pytest.raises(PartitionNotOwnedError) as refused:
        check_offset_commit(group.coordinator, a.member_id, a.generation, {foreign})
    assert refused.value.partitions == [foreign]


def test_a_static_member_restarting_within_its_session_timeout_causes_no_rebalance() -> None:
    group = Group({"orders": 6})
    a = group.add("a", instance_id="host-a")
    group.add("b", instance_id="host-b")
    group.add("c", instance_id="host-c")
    group.settle()
    generation, held, old_id = group.coordinator.generation, a.owned, a.member_id
    group.crash(a)
    group.advance(SESSION_MS // 2)
    restarted = group.add("a2", instance_id="host-a")
    group.advance(1_000)
    assert group.coordinator.generation == generation
    assert restarted.owned == held and restarted.stable
    assert restarted.member_id != old_id
    # The old process is fenced: its id no longer speaks for the instance.
    with pytest.raises(FencedInstanceIdError):
        check_offset_commit(group.coordinator, old_id, generation, held, "host-a")
    reply = group.coordinator.heartbeat(HeartbeatRequest(old_id, generation, "host-a"), group.now_ms).reply
    assert reply is not None and isinstance(reply.error, FencedInstanceIdError)


def test_a_static_member_that_stays_away_beyond_its_session_timeout_is_rebalanced_away() -> None:
    group = Group({"orders": 6})
    a = group.add("a", instance_id="host-a")
    group.add("b", instance_id="host-b")
    group.settle()
    generation = group.coordinator.generation
    group.crash(a)
    group.advance(SESSION_MS + 1_000)
    group.settle()
    assert group.coordinator.generation > generation
    assert group.coordinator.member_of_instance("host-a") is None
    assert len(group.consumers["b"].owned) == 6


def test_replaying_the_replicated_records_on_a_new_coordinator_reproduces_the_group() -> None:
    group = Group({"orders": 6, "events": 2})
    a, b, c = (group.add(name, instance_id=f"host-{name}") for name in ("a", "b", "c"))
    group.settle()
    old = group.coordinator
    reborn = GroupCoordinator.from_records(group.group_id, group.records, counter_ids(), group.now_ms)
    assert reborn is not None

    def shape(g: GroupCoordinator) -> object:
        members = {
            m.member_id: (m.group_instance_id, m.assignment, m.subscription.topics) for m in g.snapshot(0).members
        }
        return (g.state, g.generation, g.protocol_name, g.leader_id, members)

    assert shape(reborn) == shape(old)
    group.coordinator = reborn
    for member in (a, b, c):
        assert group.can_commit(member) is None
    generation = reborn.generation
    group.advance(SESSION_MS * 2)  # the members heartbeat to the new coordinator: nothing moves
    assert reborn.generation == generation and reborn.state is GroupState.STABLE


def test_a_failover_during_a_rebalance_restarts_it_from_the_last_stable_generation() -> None:
    group = Group({"orders": 6})
    group.add("a"), group.add("b")
    group.settle()
    stable = group.records[-1]
    group.add("c")  # a rebalance begins; the coordinator dies before it writes the new generation
    group.log = group.log[: group.records.index(stable) + 1]
    reborn = GroupCoordinator.from_records(group.group_id, group.records, counter_ids(), group.now_ms)
    assert reborn is not None and isinstance(stable, GroupMetadataRecord)
    assert reborn.generation == stable.generation
    group.coordinator = reborn
    for consumer in group.consumers.values():  # everyone rediscovers the coordinator and rejoins
        consumer.waiting, consumer.member_id = None, consumer.member_id if consumer.name != "c" else ""
        group.join(consumer)
    group.settle()
    assert sorted(len(c.owned) for c in group.consumers.values()) == [2, 2, 2]


def test_the_last_member_leaving_empties_the_group_and_records_it() -> None:
    group = Group({"orders": 2})
    a = group.add("a")
    group.settle()
    group.leave(a)
    assert group.coordinator.state is GroupState.EMPTY
    last = group.records[-1]
    assert isinstance(last, GroupMetadataRecord) and last.state is GroupState.EMPTY and last.members == ()


def test_an_absent_static_members_partitions_wait_for_it_through_a_rebalance() -> None:
    group = Group({"orders": 6})
    a = group.add("a", "sticky", instance_id="host-a", session_ms=60_000)
    b = group.add("b", "sticky", instance_id="host-b", session_ms=60_000)
    group.settle()
    held = b.owned
    group.crash(b)
    group.add("c", "sticky")  # a rebalance without b: it keeps its place (and partitions) in the group
    group.advance(35_000)
    assert group.coordinator.state is GroupState.STABLE
    assert group.coordinator.member_of_instance("host-b") is not None
    generation = group.coordinator.generation
    restarted = group.add("b2", "sticky", instance_id="host-b", session_ms=60_000)
    group.advance(1_000)
    assert group.coordinator.generation == generation  # it came back in time: no rebalance
    assert restarted.owned and restarted.owned <= held
    assert not (restarted.owned & a.owned)
