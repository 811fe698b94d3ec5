"""The member table: every known member's record, the probe order, and the events its changes produce.

The probe order doubles as the pool that random gossip and helper targets are drawn from. Members that left
or died long enough ago are forgotten when the order is reshuffled, as memberlist's ``resetNodes`` does.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from membership._types import EventKind, Member, MemberEvent, MemberMeta, MemberState
from membership.config import MembershipConfig

__all__ = ["MemberTable", "Node"]

_SUSPECT, _DEAD, _LEFT = MemberState.SUSPECT, MemberState.DEAD, MemberState.LEFT


class Node:
    """One member's record, updated in place as news about it arrives."""

    __slots__ = ("addr", "changed_at", "confirmed", "incarnation", "meta", "state")

    def __init__(
        self, meta: MemberMeta, addr: str, incarnation: int, state: MemberState, now: float, *, confirmed: bool
    ) -> None:
        self.confirmed = confirmed  # heard first-hand at addr
        self.meta = meta
        self.addr = addr
        self.incarnation = incarnation
        self.state = state
        self.changed_at = now

    def snapshot(self) -> Member:
        return Member(self.meta, self.addr, self.incarnation, self.state, self.changed_at, self.confirmed)


class MemberTable:
    """Known members by node id (this one included), how many are live, and the events of their changes."""

    __slots__ = ("_config", "_ids", "_probe_index", "_rng", "events", "live", "local_id", "nodes")

    def __init__(self, config: MembershipConfig, local_id: int, rng: random.Random) -> None:
        self._config = config
        self._rng = rng
        self.local_id = local_id
        self.nodes: dict[int, Node] = {}
        # Every known node id (ours too) in probe order; also sampled for gossip and helper targets.
        self._ids: list[int] = []
        self._probe_index = 0
        self.live = 0  # alive and suspect members, this one included
        self.events: list[MemberEvent] = []

    @property
    def local(self) -> Node:
        return self.nodes[self.local_id]

    def take_events(self) -> list[MemberEvent]:
        events, self.events = self.events, []
        return events

    def add(self, node: Node, now: float) -> None:
        node_id = node.meta.node_id
        self.nodes[node_id] = node
        # Insert at a random place in the probe order, so new members are probed soon on average.
        self._ids.append(node_id)
        swap = self._rng.randrange(len(self._ids))
        self._ids[swap], self._ids[-1] = self._ids[-1], self._ids[swap]
        if node.state <= _SUSPECT:
            self.live += 1
        node.changed_at = now
        self.emit(EventKind.JOIN, node, now)

    def set_state(self, node: Node, state: MemberState, now: float) -> None:
        self.live += (state <= _SUSPECT) - (node.state <= _SUSPECT)
        node.state = state
        node.changed_at = now

    def confirm(self, node: Node, now: float) -> None:
        """The member was heard first-hand at its address: its addresses are no longer hearsay."""
        node.confirmed = True
        if node.state <= _SUSPECT:
            self.emit(EventKind.UPDATE, node, now)

    def emit(self, kind: EventKind, node: Node, now: float) -> None:
        self.events.append(MemberEvent(kind, node.snapshot(), now))

    def random_nodes(self, k: int, accept: Callable[[int, Node], bool]) -> list[Node]:
        """Up to ``k`` distinct random members passing ``accept`` (memberlist's kRandomNodes)."""
        chosen: list[Node] = []
        if k <= 0:
            return chosen
        ids, nodes, seen = self._ids, self.nodes, set()
        count = len(ids)
        for _ in range(3 * count):
            node_id = ids[self._rng.randrange(count)]
            if node_id in seen:
                continue
            node = nodes.get(node_id)
            if node is None or not accept(node_id, node):
                continue
            seen.add(node_id)
            chosen.append(node)
            if len(chosen) >= k:
                break
        return chosen

    def next_probe_target(self, now: float) -> int | None:
        """The next live member other than us in probe order, or None if there is none."""
        for _ in range(2 * len(self._ids) + 2):
            if self._probe_index >= len(self._ids):
                self._reset_probe_order(now)
            node_id = self._ids[self._probe_index]
            self._probe_index += 1
            if node_id != self.local_id and self.nodes[node_id].state <= _SUSPECT:
                return node_id
        return None

    def _reset_probe_order(self, now: float) -> None:
        """Forget members that left (or died) long enough ago, and reshuffle."""
        config = self._config
        left_horizon = now - config.gossip_to_the_dead_time
        dead_horizon = now - (
            config.reconnect_timeout if config.reconnect_interval > 0 else config.gossip_to_the_dead_time
        )
        for node_id in [
            i
            for i, node in self.nodes.items()
            if i != self.local_id
            and (
                (node.state == _LEFT and node.changed_at < left_horizon)
                or (node.state == _DEAD and node.changed_at < dead_horizon)
            )
        ]:
            del self.nodes[node_id]
        self._ids = list(self.nodes)
        self._rng.shuffle(self._ids)
        self._probe_index = 0
