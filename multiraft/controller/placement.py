"""Placement decisions for the controller leader: where replicas and preferred leaders go, what moves.

Pure functions of their inputs, deterministic (ties go to the lower node id). The controller leader calls
them with its view of liveness and proposes the results as commands; apply() never calls them.

Load is weighted by capacity: a node of capacity 2 is as loaded with 20 replicas as a node of capacity 1 with
10. Moving one replica (or preferred leadership) from node u to node v *improves* the balance when
``(count[v] + 1) / capacity[v] < count[u] / capacity[u]``; with equal capacities that is
``count[u] - count[v] >= 2``, so a balanced cluster has counts within 1 of each other.

Racks are a preference that outranks load: replicas of a partition go to distinct racks while unused racks
remain, and a balancing move never lowers the number of racks a partition spans. A node with no rack counts
as being in the rack ``""``.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._model import ClusterState, NodeInfo, NodeState, PartitionState, SetPartitionReplicas
from .errors import (
    InvalidPartitionCountError,
    InvalidReplicationFactorError,
    NotEnoughNodesError,
    NotEnoughStorageError,
)

__all__ = [
    "NodeRoom",
    "ReplicaMove",
    "PreferredLeaderChange",
    "place_new_topic",
    "preferred_leader_moves",
    "plan_preferred_leaders",
    "plan_rebalance",
    "plan_repair",
    "partitions_without_quorum",
    "replica_move_step",
]


@dataclass(frozen=True)
class NodeRoom:
    """How many more new replicas a node can store (its free segment slots above its reserve, or 0 when its
    disk or map is below the low-water mark), and what limits it, for the refusal's message."""

    replicas: int
    reason: str = ""


@dataclass(frozen=True)
class ReplicaMove:
    """Move a partition's replica from ``from_node`` to ``to_node``; ``from_node=None`` only adds a replica.

    ``replaces`` (for additions planned by :func:`plan_repair`) names the lost replica the new one stands in
    for: :func:`replica_move_step` removes it once the new replica is a voter. Preferred leadership follows
    the replica that leaves.
    """

    topic: str
    partition: int
    from_node: int | None
    to_node: int
    replaces: int | None = None


@dataclass(frozen=True)
class PreferredLeaderChange:
    """Make ``to_node`` (already a voter) the preferred leader of a partition instead of ``from_node``."""

    topic: str
    partition: int
    from_node: int
    to_node: int


class _Nodes:
    """Racks and capacities of the nodes a plan may use, and a running count of what each holds."""

    def __init__(self, state: ClusterState, eligible: Iterable[int], counts: Mapping[int, int]) -> None:
        self.state = state
        self.ids = sorted(set(eligible))
        self.eligible = set(self.ids)
        self.count = {n: counts.get(n, 0) for n in self.ids}

    def rack(self, node_id: int) -> str:
        node = self.state.nodes.get(node_id)
        return node.rack if node is not None else ""

    def capacity(self, node_id: int) -> float:
        return self.state.nodes[node_id].capacity

    def load(self, node_id: int, extra: int = 0) -> float:
        return (self.count[node_id] + extra) / self.capacity(node_id)

    def improves(self, source: int, target: int) -> bool:
        """Moving one unit from ``source`` to ``target`` lowers the imbalance."""
        return self.load(target, 1) < self.load(source)

    def most_loaded_first(self) -> list[int]:
        return sorted(self.ids, key=lambda n: (-self.load(n), n))

    def best_target(
        self, members: Iterable[int], *, exclude: Iterable[int] = (), tiebreak: Mapping[int, int] | None = None
    ) -> int | None:
        """The eligible node outside ``members`` and ``exclude`` in the least used rack, then least loaded,
        then with the least ``tiebreak`` (weighted by capacity too)."""
        taken = set(members) | set(exclude)
        rack_uses = Counter(self.rack(m) for m in members)
        options = [n for n in self.ids if n not in taken]
        if not options:
            return None
        second = tiebreak or {}
        return min(
            options,
            key=lambda n: (rack_uses[self.rack(n)], self.load(n, 1), second.get(n, 0) / self.capacity(n), n),
        )

    def racks_in_use(self) -> bool:
        return len({self.rack(n) for n in self.state.nodes}) > 1

    def keeps_racks(self, p: PartitionState, source: int, target: int) -> bool:
        """Replacing ``source`` by ``target`` leaves ``p`` on at least as many racks."""
        before = {self.rack(m) for m in p.members}
        after = {self.rack(m) for m in p.members if m != source} | {self.rack(target)}
        return len(after) >= len(before)


class _Room:
    """What each node may still receive while a plan is made (nodes not listed: no limit)."""

    def __init__(self, room: Mapping[int, NodeRoom] | None) -> None:
        self.left = {n: r.replicas for n, r in (room or {}).items()}

    def full(self) -> set[int]:
        return {n for n, free in self.left.items() if free <= 0}

    def take(self, node_id: int) -> None:
        if node_id in self.left:
            self.left[node_id] -= 1


def _candidates(state: ClusterState, nodes: Iterable[NodeInfo]) -> list[int]:
    """Ids of ``nodes`` that are registered and ACTIVE in ``state`` (what apply will accept as targets)."""
    ids = set()
    for node in nodes:
        registered = state.nodes.get(node.node_id)
        if node.state is NodeState.ACTIVE and registered is not None and registered.state is NodeState.ACTIVE:
            ids.add(node.node_id)
    return sorted(ids)


# ------------------------------------------------------------------------------------------- new topics


def place_new_topic(
    nodes: Sequence[NodeInfo],
    state: ClusterState,
    partitions: int,
    replication_factor: int,
    room: Mapping[int, NodeRoom] | None = None,
) -> list[tuple[tuple[int, ...], int]]:
    """Choose (replicas, preferred leader) for each partition of a new topic, for a CreateTopic command.

    ``nodes`` are the candidates: the ACTIVE nodes the proposer believes alive. Replica counts per node,
    existing topics included, stay as even as capacities allow; a partition's replicas are on distinct nodes
    and on distinct racks while unused racks remain; preferred leaders are balanced the same way. Each
    partition's replicas start with its preferred leader.

    Raises :class:`InvalidPartitionCountError` for ``partitions < 1``, :class:`InvalidReplicationFactorError`
    when ``replication_factor`` is below 1 or above the number of registered nodes, and
    :class:`NotEnoughNodesError` when it is above the number of candidates.

    ``room`` limits how many replicas each node may receive (nodes it does not list are not limited); when
    the replicas cannot all be placed within it, :class:`NotEnoughStorageError` names what each short node
    lacks, so that a topic is refused whole rather than created on nodes that cannot store it.
    """
    if partitions < 1:
        raise InvalidPartitionCountError(partitions)
    registered = len(state.nodes_in_state(NodeState.ACTIVE, NodeState.DRAINING))
    if replication_factor < 1 or replication_factor > registered:
        raise InvalidReplicationFactorError(replication_factor, registered)
    candidates = _candidates(state, nodes)
    if len(candidates) < replication_factor:
        raise NotEnoughNodesError(replication_factor, len(candidates))

    leaders = _Nodes(state, candidates, state.preferred_leader_counts())
    replica_sets = _place_replicas(state, candidates, leaders, partitions, replication_factor, room or {}, False)
    if replica_sets is None:  # the balanced order ran out of room: fill the roomiest nodes first
        replica_sets = _place_replicas(state, candidates, leaders, partitions, replication_factor, room or {}, True)
    if replica_sets is None:
        assert room is not None
        needed = partitions * replication_factor
        short = {n: room[n].reason or f"room for {room[n].replicas} more replica(s)" for n in candidates if n in room}
        raise NotEnoughStorageError(f"{partitions} partition(s) x {replication_factor} replica(s) ({needed})", short)

    chosen_leaders = _balance_leaders(leaders, replica_sets, [None] * partitions)
    return [
        ((leader, *(r for r in replicas if r != leader)), leader)
        for replicas, leader in zip(replica_sets, chosen_leaders, strict=True)
    ]


def _place_replicas(
    state: ClusterState,
    candidates: list[int],
    leaders: _Nodes,
    partitions: int,
    replication_factor: int,
    room: Mapping[int, NodeRoom],
    roomiest_first: bool,
) -> list[tuple[int, ...]] | None:
    """Replica sets for a new topic within ``room``, or None when they do not fit this way."""
    pool = _Nodes(state, candidates, state.replica_counts())
    left = {n: room[n].replicas for n in candidates if n in room}
    # Where replica counts tie, the first replica (the likely leader) goes to a node with few preferred
    # leaders and the others to nodes with many, keeping the least-led nodes free to lead: that leaves the
    # leader balancing below little to do.
    tentative = dict(leaders.count)
    followers = {n: -c for n, c in tentative.items()}
    replica_sets: list[tuple[int, ...]] = []
    for _ in range(partitions):
        chosen: list[int] = []
        full = [n for n, free in left.items() if free <= 0]
        for slot in range(replication_factor):
            tiebreak = followers if slot else tentative
            if roomiest_first and left:
                options = [n for n in candidates if n not in chosen and n not in full]
                target = min(options, key=lambda n: (-left.get(n, 1 << 62), n)) if options else None
            else:
                target = pool.best_target(chosen, exclude=full, tiebreak=tiebreak)
            if target is None:
                return None
            chosen.append(target)
            pool.count[target] += 1
            if target in left:
                left[target] -= 1
        tentative[chosen[0]] += 1
        followers[chosen[0]] -= 1
        replica_sets.append(tuple(chosen))
    return replica_sets


def _balance_leaders(pool: _Nodes, options: list[tuple[int, ...]], current: list[int | None]) -> list[int]:
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
    pool: _Nodes, options: list[tuple[int, ...]], led: dict[int, set[int]]
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


# ------------------------------------------------------------------------------------------- leadership


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
    candidates = _candidates(state, active_nodes)
    eligible = set(candidates)
    movable = [p for p in state.groups().values() if not eligible.isdisjoint(p.replicas)]
    fixed = Counter(p.preferred_leader for p in state.groups().values() if eligible.isdisjoint(p.replicas))
    pool = _Nodes(state, candidates, fixed)
    current: list[int | None] = [p.preferred_leader for p in movable]
    leaders = _balance_leaders(pool, [p.replicas for p in movable], current)
    return [
        PreferredLeaderChange(p.topic, p.partition, p.preferred_leader, leader)
        for p, leader in zip(movable, leaders, strict=True)
        if leader != p.preferred_leader
    ]


# ---------------------------------------------------------------------------------------------- moves


def plan_rebalance(
    state: ClusterState,
    active_nodes: Sequence[NodeInfo],
    max_moves: int,
    room: Mapping[int, NodeRoom] | None = None,
) -> list[ReplicaMove]:
    """Up to ``max_moves`` replica moves: first off DRAINING nodes, then from the most to the least loaded.

    ``active_nodes`` are the live ACTIVE nodes that may receive replicas; replicas on other nodes (dead or
    unknown liveness) are neither counted nor moved here (see :func:`plan_repair`). Partitions with learners
    (a move in flight) are left alone; no partition gets two moves; no move puts two replicas of a partition
    on one node or lowers the number of racks a partition spans.

    Once replica counts are balanced, a plan may instead move replicas so that preferred leaders can be
    balanced too (a node holding many single-replica partitions leads them all): one move where that keeps
    replica counts balanced, or a swap of two replicas, which needs ``max_moves >= 2``. Applied repeatedly
    (each move completed), the plans bring replica counts within 1 of each other for equal capacities, and
    then :func:`plan_preferred_leaders` brings preferred leaders within 1 too.

    ``room`` limits the replicas each node may receive, as for :func:`place_new_topic`: a node without room
    receives none (a replica may still move off it).
    """
    left = _Room(room)
    pool = _Nodes(state, _candidates(state, active_nodes), state.replica_counts())
    moves: list[ReplicaMove] = []
    moved: set[int] = set()
    settled = [p for p in state.groups().values() if not p.learners]

    for p in settled:
        if len(moves) >= max_moves:
            return moves
        for node_id in p.replicas:
            node = state.nodes[node_id]
            if node.state is not NodeState.DRAINING:
                continue
            staying = [m for m in p.members if m != node_id]
            target = pool.best_target(staying, exclude=[node_id, *left.full()])
            if target is not None:
                moves.append(ReplicaMove(p.topic, p.partition, node_id, target))
                pool.count[target] += 1
                left.take(target)
                moved.add(p.group_id)
                break

    use_racks = pool.racks_in_use()
    while len(moves) < max_moves:
        move = _balancing_move(pool, [p for p in settled if p.group_id not in moved], use_racks, left.full())
        if move is None:
            break
        p, source, target = move
        moves.append(ReplicaMove(p.topic, p.partition, source, target))
        pool.count[source] -= 1
        pool.count[target] += 1
        left.take(target)
        moved.add(p.group_id)
    if not moves:
        moves = _leader_balancing_moves(state, pool, settled, max_moves, use_racks, left)
    return moves


def _balancing_move(
    pool: _Nodes, partitions: list[PartitionState], use_racks: bool, full: set[int]
) -> tuple[PartitionState, int, int] | None:
    by_node: dict[int, list[PartitionState]] = {}
    for p in partitions:
        for r in p.replicas:
            by_node.setdefault(r, []).append(p)
    for source in pool.most_loaded_first():
        if not any(pool.improves(source, n) for n in pool.ids):
            continue
        # Moving a follower's replica leaves leadership where it is.
        for p in sorted(by_node.get(source, ()), key=lambda p: (p.preferred_leader == source, p.group_id)):
            options = [
                n
                for n in pool.ids
                if n not in p.members
                and n not in full
                and pool.improves(source, n)
                and (not use_racks or pool.keeps_racks(p, source, n))
            ]
            if options:
                return p, source, min(options, key=lambda n: (pool.load(n, 1), n))
    return None


def _leader_balancing_moves(
    state: ClusterState, pool: _Nodes, settled: list[PartitionState], max_moves: int, use_racks: bool, left: _Room
) -> list[ReplicaMove]:
    """Replica moves that let preferred leaders balance when changing preferred leaders alone cannot.

    With replica counts balanced, a node can still be stuck with too many leaders (partitions with one
    replica, or whose other replicas are all as busy). Given the best preferred leaders for the current
    replica sets, move a partition led by an over-led node u to an under-led node v: alone when v holds
    fewer replicas than u, else together with a replica of v's (of a partition v does not lead) going to u,
    so replica counts stay as they are.
    """
    movable = [p for p in settled if not pool.eligible.isdisjoint(p.replicas)]
    movable_ids = {p.group_id for p in movable}
    fixed = Counter(p.preferred_leader for p in state.groups().values() if p.group_id not in movable_ids)
    lead = _Nodes(state, pool.ids, fixed)
    leaders = _balance_leaders(lead, [p.replicas for p in movable], [p.preferred_leader for p in movable])
    leader_of = {p.group_id: leader for p, leader in zip(movable, leaders, strict=True)}
    moves: list[ReplicaMove] = []
    moved: set[int] = set()

    def can_move(p: PartitionState, source: int, target: int) -> bool:
        return (
            p.group_id not in moved
            and target not in p.members
            and target not in left.full()
            and (not use_racks or pool.keeps_racks(p, source, target))
        )

    while len(moves) < max_moves:
        chosen: list[tuple[PartitionState, int, int]] = []
        for u in lead.most_loaded_first():
            for v in sorted(lead.ids, key=lambda n: (lead.load(n), n)):
                if not lead.improves(u, v):
                    break
                led = [p for p in movable if leader_of[p.group_id] == u and can_move(p, u, v)]
                if not led:
                    continue
                if pool.load(v, 1) <= pool.load(u):
                    chosen = [(led[0], u, v)]
                elif len(moves) + 2 <= max_moves:
                    back = next(
                        (q for q in movable if v in q.replicas and leader_of[q.group_id] != v and can_move(q, v, u)),
                        None,
                    )
                    if back is not None:
                        chosen = [(led[0], u, v), (back, v, u)]
                if chosen:
                    break
            if chosen:
                break
        if not chosen:
            return moves
        for p, source, target in chosen:
            moves.append(ReplicaMove(p.topic, p.partition, source, target))
            pool.count[source] -= 1
            pool.count[target] += 1
            left.take(target)
            moved.add(p.group_id)
        first, u, v = chosen[0]
        leader_of[first.group_id] = v
        lead.count[u] -= 1
        lead.count[v] += 1
    return moves


def plan_repair(
    state: ClusterState,
    dead: set[int],
    candidates: Sequence[NodeInfo],
    room: Mapping[int, NodeRoom] | None = None,
    stranded: Mapping[int, Iterable[int]] | None = None,
) -> list[ReplicaMove]:
    """One added replica (``from_node=None``, ``replaces`` = the dead node) per voter lost to a dead node.

    Targets are live ACTIVE ``candidates`` outside the partition, in an unused rack where one remains, least
    loaded first. Live learners count as replacements already under way. Partitions whose live voters are not
    a majority are skipped: their group cannot change membership (see :func:`partitions_without_quorum`).
    When no target is left, the partition is repaired as far as possible. Targets stay within ``room``.

    ``stranded`` (node id -> group ids) are replicas a live node was assigned but could not store: each is
    moved (``from_node`` = that node) to a node with room, as a lost one is replaced.
    """
    live = [n for n in _candidates(state, candidates) if n not in dead]
    pool = _Nodes(state, live, state.replica_counts())
    left = _Room(room)
    unstored = {(node, group) for node, groups in (stranded or {}).items() for group in groups}
    moves: list[ReplicaMove] = []
    for p in state.groups().values():
        lost = [r for r in p.replicas if r in dead]
        if lost and 2 * (len(p.replicas) - len(lost)) > len(p.replicas):
            pending = [n for n in p.learners if n not in dead]
            members = [m for m in p.members if m not in dead]
            for replaced in lost[len(pending) :]:
                target = pool.best_target(members, exclude=[*p.members, *left.full()])
                if target is None:
                    break
                moves.append(ReplicaMove(p.topic, p.partition, None, target, replaces=replaced))
                members.append(target)
                pool.count[target] += 1
                left.take(target)
        elif not lost and not p.learners:
            for node in p.replicas:
                if (node, p.group_id) not in unstored:
                    continue
                target = pool.best_target([m for m in p.members if m != node], exclude=[node, *left.full()])
                if target is not None:
                    moves.append(ReplicaMove(p.topic, p.partition, node, target))
                    pool.count[target] += 1
                    left.take(target)
                break  # one move per partition at a time
    return moves


def partitions_without_quorum(state: ClusterState, dead: set[int]) -> list[PartitionState]:
    """Partitions whose live voters are not a majority: unavailable until their nodes come back."""
    return [p for p in state.groups().values() if 2 * sum(r not in dead for r in p.replicas) <= len(p.replicas)]


def replica_move_step(state: ClusterState, move: ReplicaMove) -> SetPartitionReplicas | None:
    """The next command of ``move`` given the partition's current assignment, or None when it is done.

    Steps: add ``to_node`` as a learner; promote it to voter (once it has caught up: the runtime's call);
    remove ``from_node`` (or ``replaces``), handing it preferred leadership if it had it. Each command is
    conditional on the assignment it was computed from. Raises TopicNotFoundError/PartitionNotFoundError if
    the partition is gone.
    """
    p = state.partition(move.topic, move.partition)
    leaving = move.from_node if move.from_node is not None else move.replaces
    replicas, learners, preferred = p.replicas, p.learners, p.preferred_leader
    if move.to_node not in p.members:
        learners = (*learners, move.to_node)
    elif move.to_node in learners:
        learners = tuple(n for n in learners if n != move.to_node)
        replicas = (*replicas, move.to_node)
    elif leaving is not None and leaving != move.to_node and leaving in p.members:
        replicas = tuple(n for n in replicas if n != leaving)
        learners = tuple(n for n in learners if n != leaving)
        if preferred == leaving:
            preferred = move.to_node
    else:
        return None
    return SetPartitionReplicas(p.topic, p.partition, replicas, learners, preferred, p.replicas, p.learners)
