"""A deterministic in-memory network for :class:`SwimCore`: virtual clock, seeded loss, latency and faults.

It is a discrete-event simulator: packets, push-pull exchanges and each core's next deadline sit in one
heap ordered by virtual time, so a run of minutes takes as long as the protocol work in it, never sleeps,
and replays exactly for a given seed. Tests use it to check the protocol; the benchmark uses it to project
traffic and detection times to clusters of hundreds or thousands of members.

Faults: random UDP loss (push-pull rides TCP and is not lost), crashes, restarts at a new address,
partitions, and slow nodes (every packet to them is delayed, as for a stalled event loop).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from membership._state import SwimCore
from membership._types import MemberEvent, MemberMeta, MemberState
from membership.config import MembershipConfig

__all__ = ["SimulatedNetwork", "NetworkStats"]

_DELIVER, _TIMER, _PUSH_PULL_REQUEST, _PUSH_PULL_RESPONSE = range(4)
# A core whose deadline does not move forward after a tick would spin forever; step past it instead.
_MIN_STEP = 1e-6


@dataclass(slots=True)
class NetworkStats:
    """What the simulated network carried."""

    packets_sent: int = 0
    packets_lost: int = 0
    packets_delivered: int = 0
    push_pulls: int = 0


class _SimNode:
    __slots__ = ("addr", "core", "timer_at")

    def __init__(self, core: SwimCore, addr: str) -> None:
        self.core = core
        self.addr = addr
        self.timer_at = float("inf")


class SimulatedNetwork:
    """Runs many :class:`SwimCore` instances against one virtual clock (seconds, starting at 0)."""

    def __init__(
        self,
        *,
        seed: int = 0,
        loss: float = 0.0,
        latency: tuple[float, float] = (0.0002, 0.002),
        record_events: bool = True,
    ) -> None:
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss}")
        self.now = 0.0
        self.loss = loss
        self.latency = latency
        self.stats = NetworkStats()
        self.events: list[tuple[int, MemberEvent]] = []
        self._record_events = record_events
        self._seed = seed
        self._rng = random.Random(seed)
        self._heap: list[tuple[float, int, int, Any]] = []
        self._counter = 0
        self._nodes: dict[int, _SimNode] = {}
        self._by_addr: dict[str, int] = {}
        self._generation: dict[int, int] = {}
        self._group: dict[int, int] = {}
        self._delay: dict[int, float] = {}
        self._blocked: set[frozenset[int]] = set()
        self._listeners: list[Callable[[int, MemberEvent], None]] = []

    # Cluster shape

    @property
    def cores(self) -> dict[int, SwimCore]:
        """The running cores by node id."""
        return {node_id: node.core for node_id, node in self._nodes.items()}

    def core(self, node_id: int) -> SwimCore:
        return self._nodes[node_id].core

    def running(self) -> list[int]:
        return sorted(self._nodes)

    def address(self, node_id: int) -> str:
        return self._nodes[node_id].addr

    def add(
        self,
        config: MembershipConfig,
        meta: MemberMeta | int,
        *,
        incarnation: int = 0,
        new_address: bool = False,
    ) -> SwimCore:
        """Start a member (not yet joined). A bare node id gets placeholder metadata.

        ``new_address`` gives a restarted member a fresh gossip address, as a process that bound port 0.
        """
        if isinstance(meta, int):
            meta = MemberMeta(meta, f"n{meta}:9092", f"n{meta}:9093")
        node_id = meta.node_id
        if node_id in self._nodes:
            raise ValueError(f"node {node_id} is already running")
        generation = self._generation.get(node_id, -1) + (1 if new_address or node_id not in self._generation else 0)
        self._generation[node_id] = generation
        addr = f"n{node_id}:7946" if generation == 0 else f"n{node_id}.{generation}:7946"
        rng = random.Random(f"{self._seed}/{node_id}/{generation}/{self.now}")
        core = SwimCore(config, meta, addr, rng=rng, now=self.now, incarnation=incarnation)
        self._nodes[node_id] = _SimNode(core, addr)
        self._by_addr[addr] = node_id
        self._after(node_id)
        return core

    def join(self, node_id: int, seeds: Iterable[int]) -> None:
        """Have ``node_id`` push-pull with each seed, as :meth:`MemberList.join` does over TCP."""
        for seed in seeds:
            if seed in self._nodes and seed != node_id:
                self._push_pull(node_id, self._nodes[seed].addr, join=True)

    def start_converged(self, config: MembershipConfig, node_ids: Sequence[int]) -> None:
        """Start members that already know each other (as after joins whose gossip has settled)."""
        for node_id in node_ids:
            self.add(config, node_id)
        snapshot = [self._nodes[node_id].core.local_member for node_id in node_ids]
        for node_id in node_ids:
            core = self._nodes[node_id].core
            core.preload(self.now, snapshot)
            self._after(node_id)

    def inject(self, node_id: int, src_addr: str, data: bytes) -> None:
        """Deliver a datagram from outside the simulated members (a forger at ``src_addr``) right now."""
        self._nodes[node_id].core.receive(self.now, src_addr, data)
        self._after(node_id)

    def crash(self, node_id: int) -> None:
        """Stop a member without a word; packets to it are lost from now on."""
        node = self._nodes.pop(node_id)
        del self._by_addr[node.addr]

    def partition(self, *groups: Iterable[int]) -> None:
        """Split the network: members in different groups cannot reach each other. Unlisted: group 0."""
        self._group = {node_id: index + 1 for index, group in enumerate(groups) for node_id in group}

    def heal(self) -> None:
        """Undo :meth:`partition` and every :meth:`block`."""
        self._group = {}
        self._blocked = set()

    def block(self, a: int, b: int) -> None:
        """Cut the link between two members only (both directions); others still reach both."""
        self._blocked.add(frozenset((a, b)))

    def unblock(self, a: int, b: int) -> None:
        self._blocked.discard(frozenset((a, b)))

    def slow_down(self, node_id: int, delay: float) -> None:
        """Delay every packet to ``node_id`` by ``delay`` seconds (0 restores it)."""
        self._delay[node_id] = delay

    def subscribe(self, listener: Callable[[int, MemberEvent], None]) -> None:
        """Call ``listener(observer_node_id, event)`` for every event of every member."""
        self._listeners.append(listener)

    # Running

    def run_until(self, deadline: float) -> None:
        """Advance virtual time to ``deadline``, doing everything due before it."""
        heap = self._heap
        while heap and heap[0][0] <= deadline:
            at, _, kind, payload = heapq.heappop(heap)
            self.now = at
            self._dispatch(kind, payload)
        self.now = max(self.now, deadline)

    def run_for(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    def run_until_true(self, predicate: Callable[[], bool], *, timeout: float, step: float = 0.05) -> float | None:
        """Advance in ``step``s until ``predicate()`` holds; the virtual time it took, or None on timeout."""
        start = self.now
        while True:
            if predicate():
                return self.now - start
            if self.now - start >= timeout:
                return None
            self.run_for(step)

    # Views

    def converged(self) -> bool:
        """Every running member sees exactly the running members as alive."""
        running = set(self._nodes)
        return all(
            node.core.num_members == len(running)
            and all(node.core.state_of(other) == MemberState.ALIVE for other in running)
            for node in self._nodes.values()
        )

    def all_agree(self, node_id: int, state: MemberState | None) -> bool:
        """Every running member (other than ``node_id``) sees ``node_id`` in ``state`` (None: forgotten)."""
        return all(node.core.state_of(node_id) == state for other, node in self._nodes.items() if other != node_id)

    # Internals

    def _schedule(self, at: float, kind: int, payload: Any) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (at, self._counter, kind, payload))

    def _latency_to(self, node_id: int | None) -> float:
        low, high = self.latency
        extra = self._delay.get(node_id, 0.0) if node_id is not None else 0.0
        return low + (high - low) * self._rng.random() + extra

    def _reachable(self, a: int, b: int) -> bool:
        if self._blocked and frozenset((a, b)) in self._blocked:
            return False
        return self._group.get(a, 0) == self._group.get(b, 0)

    def _after(self, node_id: int) -> None:
        """Carry out what a core asked for, and wake it at its next deadline."""
        node = self._nodes.get(node_id)
        if node is None:
            return
        core = node.core
        for addr, data in core.take_packets():
            self.stats.packets_sent += 1
            target = self._by_addr.get(addr)
            if target is None or not self._reachable(node_id, target) or self._rng.random() < self.loss:
                self.stats.packets_lost += 1
                continue
            self._schedule(self.now + self._latency_to(target), _DELIVER, (addr, node.addr, data))
        for addr in core.take_push_pulls():
            self._push_pull(node_id, addr, join=False)
        events = core.take_events()
        if events:
            if self._record_events:
                self.events.extend((node_id, event) for event in events)
            for listener in self._listeners:
                for event in events:
                    listener(node_id, event)
        deadline = max(core.next_deadline(), self.now + _MIN_STEP)
        if deadline != node.timer_at and deadline != float("inf"):
            node.timer_at = deadline
            self._schedule(deadline, _TIMER, (node_id, core))

    def _push_pull(self, node_id: int, addr: str, *, join: bool) -> None:
        core = self._nodes[node_id].core
        data = core.push_pull_request(join=join)
        self.stats.push_pulls += 1
        target = self._by_addr.get(addr)
        self._after(node_id)
        if target is None or not self._reachable(node_id, target):
            core.counters.push_pull_failures += 1
            return
        self._schedule(self.now + self._latency_to(target), _PUSH_PULL_REQUEST, (node_id, core, addr, data))

    def _dispatch(self, kind: int, payload: Any) -> None:
        if kind == _TIMER:
            node_id, core = payload
            node = self._nodes.get(node_id)
            if node is None or node.core is not core or node.timer_at != self.now:
                return  # crashed, restarted, or rescheduled since
            node.timer_at = float("inf")
            core.tick(self.now)
            self._after(node_id)
        elif kind == _DELIVER:
            addr, src, data = payload
            target = self._by_addr.get(addr)
            if target is None:
                return
            self.stats.packets_delivered += 1
            self._nodes[target].core.receive(self.now, src, data)
            self._after(target)
        elif kind == _PUSH_PULL_REQUEST:
            origin, origin_core, addr, data = payload
            target = self._by_addr.get(addr)
            if target is None:
                origin_core.counters.push_pull_failures += 1
                return
            reply = self._nodes[target].core.handle_push_pull_request(self.now, data)
            self._after(target)
            if reply is not None:
                response = (origin, origin_core, addr, reply)
                self._schedule(self.now + self._latency_to(origin), _PUSH_PULL_RESPONSE, response)
        else:
            origin, origin_core, addr, reply = payload
            node = self._nodes.get(origin)
            if node is None or node.core is not origin_core:
                return
            origin_core.handle_push_pull_response(self.now, reply, addr)
            self._after(origin)
