"""A seeded random simulation: consumers join, leave, crash, pause, restart as the same static instance,
the clock jumps and the coordinator fails over, while the invariants hold at every step:

- no partition is assigned to two members of one generation (coordinator) or held by two current members
  (consumers; a cooperative member counts while it is in the group at all);
- at most one process may commit each partition's offsets: zombies are fenced;
- every partition a member revokes may still be committed by it (its ``on_revoke``);
- once the chaos stops the group settles: every partition owned, balanced, and a coordinator rebuilt from
  the replicated records agrees with the live one.
"""

from __future__ import annotations

import random

import pytest

from multiraft.consumer_groups import GroupCoordinator, GroupState

from ._harness import SESSION_MS, Group

PROTOCOLS = ("range", "roundrobin", "sticky", "cooperative-sticky")


def _simulate(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    protocol = PROTOCOLS[seed % len(PROTOCOLS)]
    group = Group({"a": rng.randint(1, 8), "b": rng.randint(0, 6)})
    paused: dict[str, int] = {}  # consumer -> time it resumes
    names = (f"c{i}" for i in range(10_000))

    def add() -> None:
        static = rng.random() < 0.4
        name = next(names)
        group.add(name, protocol, instance_id=f"host-{name}" if static else None)

    for _ in range(3):
        add()
    for _ in range(steps):
        action = rng.choices(
            ["add", "leave", "crash", "pause", "restart", "jump", "failover", "wait"], [4, 2, 2, 2, 2, 1, 1, 6]
        )[0]
        live = [c for c in group.consumers.values() if not c.fenced]
        victim = rng.choice(live) if live else None
        if action == "add" and len(live) < 7:
            add()
        elif action == "leave" and victim and victim.member_id and victim.name not in paused:
            group.leave(victim)
        elif action == "crash" and victim:
            group.crash(victim)
        elif action == "pause" and victim:
            paused[victim.name] = group.now_ms + rng.randint(1_000, 2 * SESSION_MS)
        elif action == "restart" and victim and victim.instance_id:
            group.crash(victim)
            group.advance(rng.randint(0, SESSION_MS + 2_000))
            group.add(next(names), protocol, instance_id=victim.instance_id)
        elif action == "jump":  # the coordinator's clock jumps: no one heartbeats in the gap
            group.advance(rng.randint(1, 2 * SESSION_MS), paused=frozenset(group.consumers))
        elif action == "failover":
            group.failover()
        for _ in range(rng.randint(1, 8)):
            paused = {n: t for n, t in paused.items() if t > group.now_ms and n in group.consumers}
            group.advance(500, paused=frozenset(paused))
    group.consumers = {n: c for n, c in group.consumers.items() if not c.fenced}
    group.settle(limit_ms=300_000)
    owned = [len(c.owned) for c in group.consumers.values()]
    if protocol != "range" and owned:
        assert max(owned) - min(owned) <= 1, group.describe()
    for generation, assignments in group.handed_out.items():
        seen = [tp for parts in assignments.values() for tp in parts]
        assert len(seen) == len(set(seen)), generation
    if group.coordinator.state is GroupState.STABLE:
        reborn = GroupCoordinator.from_records(group.group_id, group.records, group.ids, group.now_ms)
        assert reborn is not None
        assert reborn.generation == group.coordinator.generation
        assert {m: reborn.assignment_of(m) for m in reborn.member_ids} == {
            m: group.coordinator.assignment_of(m) for m in group.coordinator.member_ids
        }


@pytest.mark.parametrize("seed", range(24))
def test_random_churn_keeps_every_invariant(seed: int) -> None:
    _simulate(seed, steps=60)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24, 424))
def test_long_random_churn_keeps_every_invariant(seed: int) -> None:
    _simulate(seed, steps=300)
