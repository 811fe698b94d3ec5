"""Preferred leaders: spreading them over the nodes, and the leadership transfers that follow.

Pure and deterministic like :mod:`.placement`, which re-exports the public functions.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._model import ClusterState, NodeInfo, NodeState
from ._placement_pool import NodePool, candidates

__all__ = ["PreferredLeaderChange", "balance_leaders", "preferred_leader_moves", "plan_preferred_leaders"]


@dataclass(frozen=True)
class PreferredLeaderChange:
    """Make ``to_node`` (already a voter) the preferred leader of a partition instead of ``from_node``."""

    topic: str
    partition: int
    from_node: int
    to_node: int


def balance_leaders(pool: NodePool, options: list[tuple[int, ...]], current: list[int | None]) -> list[int]:
    """One leader per entry of ``options``, from those options, as evenly spread over ``pool`` as possible.

    ``current`` leaders are kept where they are eligible unless moving them improves the balance;
    ``pool.count`` must already include every leader not in ``options`` (and none of those in it).
    Greedy start, then cost-reducing paths (leadership shifted along a chain of partitions) until none is
    left: with equal capacities that leaves no node 2 above another that could take one of its partitions.
    """
    leaders: list[int] = []
    for choices, leader in zip(options, current, strict=True):
        eligible = [n for n in choices if n in pool.eligible]
        chosen = leader if leader in eligible else min(eligible, key=lambda n: (pool.load(n, 1), n))
        leaders.append(chosen)
        pool.count[chosen] += 1
    led: dict[int, set[int]] = {n: set() for n in pool.ids}
    for index, leader in enumerate(leaders):
        led[leader].add(index)
    while True:
        path = _find_cost_reducing_path(pool, options, led)
        if path is None:
            return leaders
        for index, old, new in path:
            leaders[index] = new
            led[old].discard(index)
            led[new].add(index)
        pool.count[path[0][1]] -= 1
        pool.count[path[-1][2]] += 1


def _find_cost_reducing_path(
    pool: NodePool, options: list[tuple[int, ...]], led: dict[int, set[int]]
) -> list[tuple[int, int, int]] | None:
    """A chain of (partition index, from, to) leadership hand-overs that improves the balance, or None.

    Searches breadth-first from the most loaded node down. A node reached by a search that failed cannot
    start or extend a successful one (whatever it reaches, a more loaded node reached too), so each node is
    explored at most once per call.
    """
    explored: set[int] = set()
    for start in pool.most_loaded_first():
        if start in explored:
            continue
        parent: dict[int, tuple[int, int, int]] = {}
        queue = deque([start])
        explored.add(start)
        while queue:
            node = queue.popleft()
            for index in sorted(led[node]):
                for other in options[index]:
                    if other in explored or other not in pool.eligible:
                        continue
                    explored.add(other)
                    parent[other] = (index, node, other)
                    if pool.improves(start, other):
                        path = [parent[other]]
                        while path[-1][1] != start:
                            path.append(parent[path[-1][1]])
                        return path[::-1]
                    queue.append(other)
    return None


def preferred_leader_moves(state: ClusterState, leaders: Mapping[int, int], healthy: set[int]) -> list[tuple[int, int]]:
    """(group id, preferred leader) for each partition of ``leaders`` (group id -> current leader) led by another
    node while its preferred leader is a healthy, ACTIVE voter: the leadership transfers to ask for, by group
    id. Groups with no known leader (0) or unknown to ``state`` are skipped, since only a leader can hand over
    leadership. A node passes the groups it leads (``multiraft.node.node``, every ``leader_balance_ms``).
    """
    moves = []
    for group_id, current in sorted(leaders.items()):
        p = state.group(group_id)
        if p is None or not current or current == p.preferred_leader:
            continue
        preferred = state.nodes.get(p.preferred_leader)
        if (
            p.preferred_leader in healthy
            and p.preferred_leader in p.replicas
            and preferred is not None
            and preferred.state is NodeState.ACTIVE
        ):
            moves.append((group_id, p.preferred_leader))
    return moves


def plan_preferred_leaders(state: ClusterState, active_nodes: Sequence[NodeInfo]) -> list[PreferredLeaderChange]:
    """Preferred-leader changes that spread preferred leadership evenly over ``active_nodes``.

    A partition whose preferred leader is not an active node (draining, dead) gets one that is, when any of
    its voters is. Changes are only made where they improve the balance. Apply each as a
    SetPartitionReplicas with the same replicas, then :func:`preferred_leader_moves` moves actual leadership.
    """
    active = candidates(state, active_nodes)
    eligible = set(active)
    movable = [p for p in state.groups().values() if not eligible.isdisjoint(p.replicas)]
    fixed = Counter(p.preferred_leader for p in state.groups().values() if eligible.isdisjoint(p.replicas))
    pool = NodePool(state, active, fixed)
    current: list[int | None] = [p.preferred_leader for p in movable]
    leaders = balance_leaders(pool, [p.replicas for p in movable], current)
    return [
        PreferredLeaderChange(p.topic, p.partition, p.preferred_leader, leader)
        for p, leader in zip(movable, leaders, strict=True)
        if leader != p.preferred_leader
    ]
