"""The nodes a placement plan may use: their racks, hosts, capacities and running replica counts.

Hosts are a hard constraint: a target never shares a non-empty host with another replica of the partition
(the one it replaces aside, so a replica may move between two nodes of one machine). A node with no host is a
host of its own. Racks are a preference (see :mod:`.placement`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ._model import ClusterState, NodeInfo, NodeState, PartitionState

__all__ = ["NodeRoom", "NodePool", "Room", "candidates", "distinct_hosts"]


@dataclass(frozen=True)
class NodeRoom:
    """How many more new replicas a node can store (its free segment slots above its reserve, or 0 when its
    disk or map is below the low-water mark), and what limits it, for the refusal's message."""

    replicas: int
    reason: str = ""


def _host_of(state: ClusterState, node_id: int) -> str | int:
    """The failure domain of ``node_id``'s machine: its host, or the node itself when it names none."""
    node = state.nodes.get(node_id)
    return node.host if node is not None and node.host else node_id


def distinct_hosts(state: ClusterState, node_ids: Iterable[int]) -> int:
    """How many machines ``node_ids`` run on (a node without a host counts as a machine of its own)."""
    return len({_host_of(state, n) for n in node_ids})


class NodePool:
    """Racks, hosts and capacities of the nodes a plan may use, and a running count of what each holds."""

    def __init__(self, state: ClusterState, eligible: Iterable[int], counts: Mapping[int, int]) -> None:
        self.state = state
        self.ids = sorted(set(eligible))
        self.eligible = set(self.ids)
        self.count = {n: counts.get(n, 0) for n in self.ids}

    def rack(self, node_id: int) -> str:
        node = self.state.nodes.get(node_id)
        return node.rack if node is not None else ""

    def host(self, node_id: int) -> str | int:
        return _host_of(self.state, node_id)

    def free_host(self, others: Iterable[int], node_id: int) -> bool:
        """``node_id`` is on no machine that one of ``others`` (other than itself) is on."""
        host = self.host(node_id)
        return all(self.host(m) != host for m in others if m != node_id)

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
        """The eligible node outside ``members`` and ``exclude`` and on a machine none of ``members`` is on, in
        the least used rack, then least loaded, then with the least ``tiebreak`` (weighted by capacity too)."""
        members = list(members)
        taken = set(members) | set(exclude)
        hosts = {self.host(m) for m in members}
        rack_uses = Counter(self.rack(m) for m in members)
        options = [n for n in self.ids if n not in taken and self.host(n) not in hosts]
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

    def may_replace(self, p: PartitionState, source: int, target: int) -> bool:
        """``target`` may take ``source``'s place in ``p``: it is not a member and shares no machine with the
        members that stay."""
        return target not in p.members and self.free_host((m for m in p.members if m != source), target)


class Room:
    """What each node may still receive while a plan is made (nodes not listed: no limit)."""

    def __init__(self, room: Mapping[int, NodeRoom] | None) -> None:
        self.left = {n: r.replicas for n, r in (room or {}).items()}

    def full(self) -> set[int]:
        return {n for n, free in self.left.items() if free <= 0}

    def take(self, node_id: int) -> None:
        if node_id in self.left:
            self.left[node_id] -= 1


def candidates(state: ClusterState, nodes: Iterable[NodeInfo]) -> list[int]:
    """Ids of ``nodes`` that are registered and ACTIVE in ``state`` (what apply will accept as targets)."""
    ids = set()
    for node in nodes:
        registered = state.nodes.get(node.node_id)
        if node.state is NodeState.ACTIVE and registered is not None and registered.state is NodeState.ACTIVE:
            ids.add(node.node_id)
    return sorted(ids)
