"""Assignors: Kafka's range, roundrobin, sticky and cooperative-sticky, and their invariants."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.consumer_groups import (
    ASSIGNORS,
    MemberSubscription,
    Subscription,
    TopicPartition,
    UnknownAssignorError,
    assignor,
    cooperative_sticky_assign,
    previous_owners,
    range_assign,
    roundrobin_assign,
    sticky_assign,
    topics_without_racks,
)

TOPICS = ("t0", "t1", "t2")


def _member(
    name: str, topics: Sequence[str], owned: Sequence[TopicPartition] = (), gen: int = 1, rack: str | None = None
):
    return MemberSubscription(name, None, Subscription(tuple(sorted(topics)), frozenset(owned), gen, rack))


@st.composite
def groups(draw: st.DrawFn, identical: bool = False) -> tuple[list[MemberSubscription], dict[str, int]]:
    partitions = {t: draw(st.integers(0, 9)) for t in TOPICS}
    count = draw(st.integers(1, 6))
    every = [(t, p) for t, n in partitions.items() for p in range(n)]
    members = []
    same = draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
    for i in range(count):
        topics = same if identical else draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
        owned = draw(st.lists(st.sampled_from(every), unique=True)) if every else []
        gen = draw(st.integers(-1, 3))
        members.append(_member(f"m{i}", topics, owned, gen))
    return members, partitions


def _check_valid(
    plan: dict[str, frozenset[TopicPartition]],
    members: list[MemberSubscription],
    partitions: dict[str, int],
    complete: bool = True,
) -> None:
    assert set(plan) == {m.member_id for m in members}
    topics_of = {m.member_id: set(m.subscription.topics) for m in members}
    seen: list[TopicPartition] = [tp for parts in plan.values() for tp in parts]
    assert len(seen) == len(set(seen)), "a partition assigned twice"
    for member_id, parts in plan.items():
        assert all(tp[0] in topics_of[member_id] for tp in parts), "assigned to a member that does not subscribe"
    subscribed = {(t, p) for t in set().union(*topics_of.values()) for p in range(partitions[t])}
    assert set(seen) <= subscribed
    if complete:
        assert set(seen) == subscribed, "a subscribed partition left unassigned"


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@given(groups())
def test_every_subscribed_partition_goes_to_exactly_one_member_that_subscribes_to_its_topic(name, group) -> None:
    members, partitions = group
    plan = assignor(name)(members, topics_without_racks(partitions))
    _check_valid(plan, members, partitions, complete=name != "cooperative-sticky")


@pytest.mark.parametrize("name", ["roundrobin", "sticky"])
@given(groups(identical=True))
def test_identical_subscriptions_are_balanced_to_within_one_partition(name, group) -> None:
    members, partitions = group
    counts = [len(p) for p in assignor(name)(members, topics_without_racks(partitions)).values()]
    assert max(counts) - min(counts) <= 1


@given(groups())
def test_sticky_is_balanced_in_that_no_single_move_evens_it_out_further(group) -> None:
    members, partitions = group
    plan = sticky_assign(members, topics_without_racks(partitions))
    topics_of = {m.member_id: m.subscription.topics for m in members}
    for source, parts in plan.items():
        for tp in parts:
            for target in plan:
                if tp[0] in topics_of[target]:
                    assert len(plan[source]) - len(plan[target]) <= 1, (tp, source, target)


@given(groups(identical=True))
def test_sticky_keeps_as_many_partitions_with_their_previous_owners_as_balance_allows(group) -> None:
    members, partitions = group
    plan = sticky_assign(members, topics_without_racks(partitions))
    owners = previous_owners(members, topics_without_racks(partitions))
    kept = sum(1 for tp, owner in owners.items() if tp in plan[owner])
    held = sorted((sum(1 for o in owners.values() if o == m.member_id) for m in members), reverse=True)
    total = sum(partitions[t] for t in members[0].subscription.topics)
    base, extra = divmod(total, len(members))
    best = sum(min(h, base + (1 if i < extra else 0)) for i, h in enumerate(held))
    assert kept == best


@given(groups())
def test_cooperative_sticky_never_hands_a_partition_to_a_new_owner_while_the_old_one_holds_it(group) -> None:
    members, partitions = group
    topics = topics_without_racks(partitions)
    plan = cooperative_sticky_assign(members, topics)
    owners = previous_owners(members, topics)
    for member_id, parts in plan.items():
        for tp in parts:
            assert owners.get(tp, member_id) == member_id
    # What it withholds this generation is exactly what sticky moves: a second round hands it over.
    sticky = sticky_assign(members, topics)
    moved = {tp for m, parts in sticky.items() for tp in parts if owners.get(tp, m) != m}
    assert set().union(*sticky.values()) - set().union(*plan.values()) == moved


@given(groups(identical=True))
def test_two_cooperative_rounds_reach_the_sticky_assignment(group) -> None:
    members, partitions = group
    topics = topics_without_racks(partitions)
    first = cooperative_sticky_assign(members, topics)
    rejoined = [
        MemberSubscription(m.member_id, None, Subscription(m.subscription.topics, first[m.member_id], 5))
        for m in members
    ]
    second = cooperative_sticky_assign(rejoined, topics)
    _check_valid(second, members, partitions)
    counts = [len(p) for p in second.values()]
    assert max(counts) - min(counts) <= 1


@given(groups(identical=True))
def test_a_balanced_assignment_of_unchanged_members_moves_nothing(group) -> None:
    members, partitions = group
    topics = topics_without_racks(partitions)
    plan = sticky_assign(members, topics)
    again = [
        MemberSubscription(m.member_id, None, Subscription(m.subscription.topics, plan[m.member_id], 7))
        for m in members
    ]
    assert sticky_assign(again, topics) == plan
    assert cooperative_sticky_assign(again, topics) == plan


def test_range_gives_consecutive_ranges_per_topic_and_the_first_members_one_more() -> None:
    members = [_member("c", ["a", "b"]), _member("a", ["a", "b"]), _member("b", ["a"])]
    plan = range_assign(members, topics_without_racks({"a": 7, "b": 3}))
    assert plan == {
        "a": frozenset({("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)}),
        "b": frozenset({("a", 3), ("a", 4)}),
        "c": frozenset({("a", 5), ("a", 6), ("b", 2)}),
    }


def test_range_orders_static_members_by_instance_id_before_dynamic_ones() -> None:
    static = MemberSubscription("z-member", "instance-1", Subscription(("t",)))
    dynamic = _member("a-member", ["t"])
    plan = range_assign([dynamic, static], topics_without_racks({"t": 3}))
    assert plan["z-member"] == {("t", 0), ("t", 1)}


def test_roundrobin_deals_sorted_partitions_to_the_members_that_subscribe() -> None:
    members = [_member("a", ["x", "y"]), _member("b", ["y"])]
    plan = roundrobin_assign(members, topics_without_racks({"x": 2, "y": 3}))
    assert plan == {"a": frozenset({("x", 0), ("x", 1), ("y", 1)}), "b": frozenset({("y", 0), ("y", 2)})}


def test_a_newer_generations_claim_wins_a_partition_claimed_twice() -> None:
    members = [_member("a", ["t"], [("t", 0)], gen=3), _member("b", ["t"], [("t", 0)], gen=4)]
    assert previous_owners(members, topics_without_racks({"t": 1})) == {("t", 0): "b"}


def test_claims_of_dropped_topics_and_vanished_partitions_are_ignored() -> None:
    members = [_member("a", ["t"], [("u", 0), ("t", 5), ("t", 0)])]
    assert previous_owners(members, topics_without_racks({"t": 2, "u": 1})) == {("t", 0): "a"}


RACKED = {"t": tuple(frozenset({r}) for r in ("r1", "r2", "r1", "r2", "r1", "r2"))}


@pytest.mark.parametrize("name", ["range", "sticky", "cooperative-sticky"])
def test_rack_aware_assignors_give_members_the_partitions_of_their_rack(name: str) -> None:
    members = [_member("a", ["t"], rack="r1", gen=-1), _member("b", ["t"], rack="r2", gen=-1)]
    plan = assignor(name)(members, RACKED)
    assert plan["a"] == {("t", 0), ("t", 2), ("t", 4)}
    assert plan["b"] == {("t", 1), ("t", 3), ("t", 5)}


def test_rack_awareness_never_costs_balance() -> None:
    members = [_member(n, ["t"], rack="r1", gen=-1) for n in ("a", "b", "c")]
    plan = sticky_assign(members, RACKED)
    assert sorted(len(p) for p in plan.values()) == [2, 2, 2]


def test_an_unknown_assignor_name_is_refused() -> None:
    with pytest.raises(UnknownAssignorError, match="known"):
        assignor("uniform")


@st.composite
def racked_groups(draw: st.DrawFn) -> tuple[list[MemberSubscription], dict[str, tuple[frozenset[str], ...]]]:
    racks = st.sampled_from(["r1", "r2", "r3"])
    count = draw(st.integers(1, 12))
    topics = {"t": tuple(frozenset(draw(st.lists(racks, max_size=2))) for _ in range(count))}
    members = [_member(f"m{i}", ["t"], rack=draw(st.none() | racks), gen=-1) for i in range(draw(st.integers(1, 5)))]
    return members, topics


@pytest.mark.parametrize("name", ["range", "sticky", "cooperative-sticky"])
@given(racked_groups())
def test_rack_aware_assignments_stay_complete_and_balanced(name: str, group) -> None:
    members, topics = group
    plan = assignor(name)(members, topics)
    _check_valid(plan, members, {"t": len(topics["t"])})
    counts = [len(p) for p in plan.values()]
    assert max(counts) - min(counts) <= 1
