"""Placement decisions for the controller leader: where replicas and preferred leaders go, what moves.

Pure functions of their inputs, deterministic (ties go to the lower node id). The controller leader calls
them with its view of liveness and proposes the results as commands; apply() never calls them.

Load is weighted by capacity: a node of capacity 2 is as loaded with 20 replicas as a node of capacity 1 with
10. Moving one replica (or preferred leadership) from node u to node v *improves* the balance when
``(count[v] + 1) / capacity[v] < count[u] / capacity[u]``; with equal capacities that is
``count[u] - count[v] >= 2``, so a balanced cluster has counts within 1 of each other.

Hosts are a constraint: two replicas of a partition are never placed on nodes that share a non-empty host
(one machine running several nodes), whether a topic is created, a lost replica replaced, a node drained or
the load balanced, so a machine's loss costs at most one replica of each partition. A node with no host is a
host of its own. A topic that needs more hosts than its candidates are on is refused; a replica with nowhere
to go stays where it is. The one exception is a move's own transition: a replica may move to another node of
the same machine, and both are members until the move completes. Partitions placed before their nodes named
hosts are spread by balancing moves.

Racks are a preference that outranks load: replicas of a partition go to distinct racks while unused racks
remain, and a balancing move never lowers the number of racks a partition spans. A node with no rack counts
as being in the rack ``""``.

The nodes a plan may use are in :mod:`._placement_pool`, preferred leadership in :mod:`._placement_leaders`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._model import ClusterState, NodeInfo, NodeState, PartitionState, SetPartitionReplicas
from ._placement_leaders import (
    PreferredLeaderChange,
    balance_leaders,
    plan_preferred_leaders,
    preferred_leader_moves,
)
from ._placement_pool import NodePool, NodeRoom, Room, distinct_hosts
from ._placement_pool import candidates as _candidates
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
    of distinct hosts, and on distinct racks while unused racks remain; preferred leaders are balanced the
    same way. Each partition's replicas start with its preferred leader.

    Raises :class:`InvalidPartitionCountError` for ``partitions < 1``, :class:`InvalidReplicationFactorError`
    when ``replication_factor`` is below 1 or above the number of registered nodes, and
    :class:`NotEnoughNodesError` when it is above the number of candidates or of the hosts they are on.

    ``room`` limits how many replicas each node may receive (nodes it does not list are not limited); when
    the replicas cannot all be placed within it, :class:`NotEnoughStorageError` names what each short node
    lacks, so that a topic is refused whole rather than created on nodes that cannot store it.
    """
    if partitions < 1:
        raise InvalidPartitionCountError(partitions)
    registered = len(state.nodes_in_state(NodeState.ACTIVE, NodeState.DRAINING))
    if replication_factor < 1 or replication_factor > registered:
        raise InvalidReplicationFactorError(replication_factor, registered)
    eligible = _candidates(state, nodes)
    if len(eligible) < replication_factor:
        raise NotEnoughNodesError(replication_factor, len(eligible))
    hosts = distinct_hosts(state, eligible)
    if hosts < replication_factor:
        raise NotEnoughNodesError(replication_factor, len(eligible), hosts=hosts)

    leaders = NodePool(state, eligible, state.preferred_leader_counts())
    replica_sets = _place_replicas(state, eligible, leaders, partitions, replication_factor, room or {}, False)
    if replica_sets is None:  # the balanced order ran out of room: fill the roomiest nodes first
        replica_sets = _place_replicas(state, eligible, leaders, partitions, replication_factor, room or {}, True)
    if replica_sets is None:
        assert room is not None
        needed = partitions * replication_factor
        short = {n: room[n].reason or f"room for {room[n].replicas} more replica(s)" for n in eligible if n in room}
        raise NotEnoughStorageError(f"{partitions} partition(s) x {replication_factor} replica(s) ({needed})", short)

    chosen_leaders = balance_leaders(leaders, replica_sets, [None] * partitions)
    return [
        ((leader, *(r for r in replicas if r != leader)), leader)
        for replicas, leader in zip(replica_sets, chosen_leaders, strict=True)
    ]


def _place_replicas(
    state: ClusterState,
    eligible: list[int],
    leaders: NodePool,
    partitions: int,
    replication_factor: int,
    room: Mapping[int, NodeRoom],
    roomiest_first: bool,
) -> list[tuple[int, ...]] | None:
    """Replica sets for a new topic within ``room``, or None when they do not fit this way."""
    pool = NodePool(state, eligible, state.replica_counts())
    left = {n: room[n].replicas for n in eligible if n in room}
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
                options = [n for n in eligible if n not in chosen and n not in full and pool.free_host(chosen, n)]
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


# ---------------------------------------------------------------------------------------------- moves


def plan_rebalance(
    state: ClusterState,
    active_nodes: Sequence[NodeInfo],
    max_moves: int,
    room: Mapping[int, NodeRoom] | None = None,
) -> list[ReplicaMove]:
    """Up to ``max_moves`` replica moves: first off DRAINING nodes, then off hosts a partition uses twice
    (placed before their nodes named hosts), then from the most to the least loaded.

    ``active_nodes`` are the live ACTIVE nodes that may receive replicas; replicas on other nodes (dead or
    unknown liveness) are neither counted nor moved here (see :func:`plan_repair`). Partitions with learners
    (a move in flight) are left alone; no partition gets two moves; no move puts two replicas of a partition
    on one node or one host, or lowers the number of racks a partition spans.

    Once replica counts are balanced, a plan may instead move replicas so that preferred leaders can be
    balanced too (a node holding many single-replica partitions leads them all): one move where that keeps
    replica counts balanced, or a swap of two replicas, which needs ``max_moves >= 2``. Applied repeatedly
    (each move completed), the plans bring replica counts within 1 of each other for equal capacities, and
    then :func:`plan_preferred_leaders` brings preferred leaders within 1 too.

    ``room`` limits the replicas each node may receive, as for :func:`place_new_topic`: a node without room
    receives none (a replica may still move off it).
    """
    left = Room(room)
    pool = NodePool(state, _candidates(state, active_nodes), state.replica_counts())
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

    for p in settled:
        if len(moves) >= max_moves:
            return moves
        if p.group_id not in moved:
            spread = _host_spreading_move(pool, p, left.full())
            if spread is not None:
                source, target = spread
                moves.append(ReplicaMove(p.topic, p.partition, source, target))
                pool.count[source] -= 1
                pool.count[target] += 1
                left.take(target)
                moved.add(p.group_id)

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


def _host_spreading_move(pool: NodePool, p: PartitionState, full: set[int]) -> tuple[int, int] | None:
    """(source, target): one of ``p``'s live replicas that shares a host with another of its members (not the
    preferred leader where another can go) and a node on a host ``p`` is not on; or None."""
    crowded = [n for n in p.replicas if n in pool.eligible and not pool.free_host(p.members, n)]
    for source in sorted(crowded, key=lambda n: (n == p.preferred_leader, -pool.load(n), n)):
        target = pool.best_target([m for m in p.members if m != source], exclude=[source, *full])
        if target is not None:
            return source, target
    return None


def _balancing_move(
    pool: NodePool, partitions: list[PartitionState], use_racks: bool, full: set[int]
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
                if pool.may_replace(p, source, n)
                and n not in full
                and pool.improves(source, n)
                and (not use_racks or pool.keeps_racks(p, source, n))
            ]
            if options:
                return p, source, min(options, key=lambda n: (pool.load(n, 1), n))
    return None


def _leader_balancing_moves(
    state: ClusterState, pool: NodePool, settled: list[PartitionState], max_moves: int, use_racks: bool, left: Room
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
    lead = NodePool(state, pool.ids, fixed)
    leaders = balance_leaders(lead, [p.replicas for p in movable], [p.preferred_leader for p in movable])
    leader_of = {p.group_id: leader for p, leader in zip(movable, leaders, strict=True)}
    moves: list[ReplicaMove] = []
    moved: set[int] = set()

    def can_move(p: PartitionState, source: int, target: int) -> bool:
        return (
            p.group_id not in moved
            and pool.may_replace(p, source, target)
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

    Targets are live ACTIVE ``candidates`` outside the partition and off the hosts of its live members, in an
    unused rack where one remains, least loaded first. Live learners count as replacements already under way.
    Partitions whose live voters are not a majority are skipped: their Raft group cannot change its configuration (see
    :func:`partitions_without_quorum`).
    When no target is left, the partition is repaired as far as possible. Targets stay within ``room``.

    ``stranded`` (node id -> group ids) are replicas a live node was assigned but could not store: each is
    moved (``from_node`` = that node) to a node with room, as a lost one is replaced.
    """
    live = [n for n in _candidates(state, candidates) if n not in dead]
    pool = NodePool(state, live, state.replica_counts())
    left = Room(room)
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
