"""Partition assignors, as Kafka defines them: pure functions of the members and the topics.

An assignor takes the members as the group leader sees them (:class:`~multiraft.consumer_groups.MemberSubscription`,
each with its subscribed topics, the partitions it owns and its rack) and the topics' partitions with the
racks of their replicas, and returns ``member id -> partitions``. Every partition of a subscribed topic goes to
exactly one member that subscribes to it.

- ``range``: per topic, members sorted (static members by instance id first, then by member id) take
  consecutive ranges; the first ``partitions % members`` take one more.
- ``roundrobin``: every partition, sorted, dealt in turn to the members (sorted) that subscribe to its topic.
- ``sticky``: balanced (counts differ by at most one when subscriptions are identical; otherwise no single
  move to a member with two fewer partitions is possible) while keeping as many partitions with their previous
  owners as balance allows. A partition claimed by two members goes to the claim of the newer generation.
- ``cooperative-sticky``: ``sticky``, except that a partition that changes owner is assigned to no one in this
  generation: its owner revokes it now, and the next rebalance (the owner rejoins after revoking, as in Kafka's
  KIP-429) hands it to its new owner. No partition is ever held by two members at once.

Rack awareness (KIP-881): where a member's rack and a partition's replica racks are known, ``range`` and the
sticky assignors give partitions to members in a replica's rack first, within the same balance (so fetches
may stay in the rack); ``roundrobin`` ignores racks, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

from ._model import JoinReply, MemberSubscription, TopicPartition
from .errors import UnknownAssignorError

__all__ = [
    "Assignor",
    "TopicRacks",
    "Assignment",
    "COOPERATIVE_ASSIGNORS",
    "ASSIGNORS",
    "assignor",
    "range_assign",
    "roundrobin_assign",
    "sticky_assign",
    "cooperative_sticky_assign",
    "topics_without_racks",
    "previous_owners",
    "assign_for_leader",
]

TopicRacks: TypeAlias = Mapping[str, Sequence[frozenset[str]]]  # topic -> per partition, its replicas' racks
Assignment: TypeAlias = dict[str, frozenset[TopicPartition]]
Assignor: TypeAlias = Callable[[Sequence[MemberSubscription], TopicRacks], Assignment]

COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})


def topics_without_racks(partitions: Mapping[str, int]) -> dict[str, tuple[frozenset[str], ...]]:
    """Topic metadata for assignors when no rack is known: topic -> partition count."""
    return {topic: tuple(frozenset() for _ in range(count)) for topic, count in partitions.items()}


def _order(member: MemberSubscription) -> tuple[int, str]:
    # Kafka's MemberInfo order: static members by instance id first, then dynamic ones by member id.
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def _in_rack(member: MemberSubscription, racks: frozenset[str]) -> bool:
    return member.subscription.rack is not None and member.subscription.rack in racks


def _partitions(topic: str, topics: TopicRacks) -> list[TopicPartition]:
    return [(topic, p) for p in range(len(topics.get(topic, ())))]


def _racks(tp: TopicPartition, topics: TopicRacks) -> frozenset[str]:
    return topics[tp[0]][tp[1]]


def _finish(members: Sequence[MemberSubscription], assigned: Mapping[str, set[TopicPartition]]) -> Assignment:
    return {m.member_id: frozenset(assigned.get(m.member_id, ())) for m in members}


# ---------------------------------------------------------------------------------------------- range


def range_assign(members: Sequence[MemberSubscription], topics: TopicRacks) -> Assignment:
    assigned: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
    subscribed = sorted({t for m in members for t in m.subscription.topics if t in topics})
    for topic in subscribed:
        consumers = sorted((m for m in members if topic in m.subscription.topics), key=_order)
        partitions = _partitions(topic, topics)
        base, extra = divmod(len(partitions), len(consumers))
        quota = {m.member_id: base + (1 if i < extra else 0) for i, m in enumerate(consumers)}
        pool = list(partitions)
        # Rack pass: each member first takes partitions with a replica in its rack, within its quota.
        for member in consumers:
            for tp in [tp for tp in pool if _in_rack(member, _racks(tp, topics))]:
                if len(assigned[member.member_id] & set(partitions)) >= quota[member.member_id]:
                    break
                assigned[member.member_id].add(tp)
                pool.remove(tp)
        for member in consumers:  # then consecutive ranges of what is left (all of it, with no racks)
            need = quota[member.member_id] - len(assigned[member.member_id] & set(partitions))
            assigned[member.member_id].update(pool[:need])
            del pool[:need]
    return _finish(members, assigned)


# ----------------------------------------------------------------------------------------- roundrobin


def roundrobin_assign(members: Sequence[MemberSubscription], topics: TopicRacks) -> Assignment:
    consumers = sorted(members, key=_order)
    assigned: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
    subscribed = sorted({t for m in members for t in m.subscription.topics if t in topics})
    turn = 0
    for tp in (tp for topic in subscribed for tp in _partitions(topic, topics)):
        for _ in range(len(consumers)):
            member = consumers[turn % len(consumers)]
            turn += 1
            if tp[0] in member.subscription.topics:
                assigned[member.member_id].add(tp)
                break
    return _finish(members, assigned)


# --------------------------------------------------------------------------------------------- sticky


def previous_owners(members: Sequence[MemberSubscription], topics: TopicRacks) -> dict[TopicPartition, str]:
    """Who holds each partition now, by the members' claims: the newest generation's claim wins (a member
    that missed rebalances may still claim what it lost), ties go to the member first in Kafka's order.
    Claims of partitions that no longer exist or of topics the member dropped are ignored."""
    owners: dict[TopicPartition, str] = {}
    ranked = sorted(members, key=lambda m: (-m.subscription.owned_generation, _order(m)))
    for member in ranked:
        for tp in sorted(member.subscription.owned):
            topic, partition = tp
            exists = topic in topics and 0 <= partition < len(topics[topic])
            if exists and topic in member.subscription.topics and tp not in owners:
                owners[tp] = member.member_id
    return owners


def sticky_assign(members: Sequence[MemberSubscription], topics: TopicRacks) -> Assignment:
    if not members:
        return {}
    by_id = {m.member_id: m for m in members}
    assigned: dict[str, set[TopicPartition]] = {m.member_id: set() for m in members}
    for tp, owner in previous_owners(members, topics).items():
        assigned[owner].add(tp)
    subscriptions = {frozenset(t for t in m.subscription.topics if t in topics) for m in members}
    if len(subscriptions) == 1:
        _fill_to_quotas(sorted(members, key=_order), topics, assigned)
    else:
        _fill_and_balance(sorted(members, key=_order), topics, assigned, by_id)
    return _finish(members, assigned)


def _fill_to_quotas(
    members: list[MemberSubscription], topics: TopicRacks, assigned: dict[str, set[TopicPartition]]
) -> None:
    """Identical subscriptions: exact floor/ceil quotas, the ceil ones to the members keeping the most."""
    every = [tp for topic in sorted(members[0].subscription.topics) for tp in _partitions(topic, topics)]
    base, extra = divmod(len(every), len(members))
    by_kept = sorted(members, key=lambda m: (-len(assigned[m.member_id]), _order(m)))
    quota = {m.member_id: base + (1 if i < extra else 0) for i, m in enumerate(by_kept)}
    for member in members:  # shed the excess: partitions outside the member's rack first
        mine = assigned[member.member_id]
        surplus = len(mine) - quota[member.member_id]
        if surplus > 0:
            mine.difference_update(_worst(member, mine, topics, surplus))
    taken = set().union(*assigned.values())
    pool = [tp for tp in every if tp not in taken]
    for rack_pass in (True, False):
        for tp in list(pool):
            candidates = [
                m
                for m in members
                if len(assigned[m.member_id]) < quota[m.member_id]
                and (not rack_pass or _in_rack(m, _racks(tp, topics)))
            ]
            if candidates:
                best = min(candidates, key=lambda m: (len(assigned[m.member_id]), _order(m)))
                assigned[best.member_id].add(tp)
                pool.remove(tp)


def _worst(
    member: MemberSubscription, mine: set[TopicPartition], topics: TopicRacks, count: int
) -> list[TopicPartition]:
    """The ``count`` partitions ``member`` should give up first: out of its rack, then the highest."""
    ranked = sorted(mine, key=lambda tp: (not _in_rack(member, _racks(tp, topics)), tp), reverse=True)
    return ranked[:count]


def _fill_and_balance(
    members: list[MemberSubscription],
    topics: TopicRacks,
    assigned: dict[str, set[TopicPartition]],
    by_id: Mapping[str, MemberSubscription],
) -> None:
    """Different subscriptions: greedy fill, then single moves while one evens the counts out by two."""
    eligible: dict[TopicPartition, list[MemberSubscription]] = {}
    for topic in sorted({t for m in members for t in m.subscription.topics if t in topics}):
        for tp in _partitions(topic, topics):
            eligible[tp] = [m for m in members if topic in m.subscription.topics]
    taken = set().union(*assigned.values())
    for tp in sorted((tp for tp in eligible if tp not in taken), key=lambda tp: (len(eligible[tp]), tp)):
        best = min(
            eligible[tp],
            key=lambda m: (len(assigned[m.member_id]), not _in_rack(m, _racks(tp, topics)), _order(m)),
        )
        assigned[best.member_id].add(tp)
    # Each move lowers the sum of squared counts by at least two, so this ends; the bound is a backstop.
    for _ in range(len(eligible) * len(members) + 1):
        move = _best_move(members, topics, assigned, eligible)
        if move is None:
            return
        tp, source, target = move
        assigned[source].remove(tp)
        assigned[target].add(tp)


def _best_move(
    members: list[MemberSubscription],
    topics: TopicRacks,
    assigned: dict[str, set[TopicPartition]],
    eligible: Mapping[TopicPartition, list[MemberSubscription]],
) -> tuple[TopicPartition, str, str] | None:
    best: tuple[tuple[int, bool, TopicPartition], tuple[TopicPartition, str, str]] | None = None
    for source in members:
        have = len(assigned[source.member_id])
        for tp in assigned[source.member_id]:
            for target in eligible[tp]:
                gain = have - len(assigned[target.member_id])
                if gain >= 2:
                    key = (-gain, not _in_rack(target, _racks(tp, topics)), tp)
                    if best is None or key < best[0]:
                        best = (key, (tp, source.member_id, target.member_id))
    return best[1] if best else None


def cooperative_sticky_assign(members: Sequence[MemberSubscription], topics: TopicRacks) -> Assignment:
    target = sticky_assign(members, topics)
    owners = previous_owners(members, topics)
    return {
        member_id: frozenset(tp for tp in parts if owners.get(tp, member_id) == member_id)
        for member_id, parts in target.items()
    }


ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}


def assignor(name: str) -> Assignor:
    """The assignor called ``name`` (Kafka's ``partition.assignment.strategy`` names)."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise UnknownAssignorError(f"unknown assignor {name!r}; known: {sorted(ASSIGNORS)}") from None


def assign_for_leader(reply: JoinReply, topics: TopicRacks) -> tuple[tuple[str, frozenset[TopicPartition]], ...]:
    """The ``assignments`` of the leader's SyncGroup, computed with the group's protocol from the leader's
    JoinGroup reply: what a Kafka client's leader does, and what the gRPC surface does for its members
    (server-side assignment). Empty for a reply that is not the leader's or that skips assignment."""
    if reply.member_id != reply.leader_id or reply.skip_assignment or reply.protocol_name is None:
        return ()
    plan = assignor(reply.protocol_name)(reply.members, topics)
    return tuple(sorted(plan.items()))
