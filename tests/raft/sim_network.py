"""The seeded simulation's network: messages in flight between nodes, with seeded drops, duplicates, delays and
reordering, and partitions that block links."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from multiraft.raft import Message, decode_message, encode_message_buffers

from .sim_params import SimParams

__all__ = ["SimNetwork"]


@dataclass(order=True)
class _InFlight:
    at: int
    seq: int
    message: Message = field(compare=False)
    sent: int = field(compare=False, default=0)  # the tick it was sent at
    duplicate: bool = field(compare=False, default=False)  # the second copy of a duplicated message


class SimNetwork:
    """Links FIFO per (sender, receiver) pair, as one connection per peer, except the reordered messages.

    It draws from the simulation's own generator, in the simulation's order: one seed, one schedule. ``lost`` is
    told of every message dropped or sent into a blocked link or to a node that is down."""

    def __init__(
        self, rng: random.Random, params: SimParams, stats: Counter[str], lost: Callable[[Message], None]
    ) -> None:
        self.rng = rng
        self.params = params
        self.stats = stats
        self.lost = lost
        self.seq = 0  # numbers the messages sent (and the simulation's read contexts)
        self.in_flight: list[_InFlight] = []
        self.link_clock: dict[tuple[int, int], int] = {}
        self.blocked: set[tuple[int, int]] = set()  # links cut by a partition
        self.link_delivered: dict[tuple[int, int], int] = {}

    def send(self, messages: list[Message], now: int) -> None:
        """Queue messages sent at tick ``now``."""
        p = self.params
        rng = self.rng
        for m in messages:
            if p.drop and rng.random() < p.drop:
                self.stats["messages dropped"] += 1
                self.lost(m)
                continue
            copies = 2 if p.duplicate and rng.random() < p.duplicate else 1
            for copy in range(copies):
                self.seq += 1
                link = (m.sender, m.to)
                at = now + (rng.randint(0, p.max_delay) if p.max_delay else 0)
                if p.reorder and rng.random() < p.reorder:
                    at += rng.randint(1, 3)  # overtaken by later messages on the same link
                else:
                    at = max(at, self.link_clock.get(link, 0))
                    self.link_clock[link] = at
                self.in_flight.append(_InFlight(at, self.seq, m, now, copy > 0))

    def deliverable(self, now: int) -> list[int]:
        """The positions of the messages that may be delivered at tick ``now``: the first due on each link."""
        heads: dict[tuple[int, int], int] = {}
        for i, f in enumerate(self.in_flight):
            if f.at <= now:
                heads.setdefault((f.message.sender, f.message.to), i)
        return list(heads.values())

    def take(self, position: int, now: int, up: set[int]) -> Message | None:
        """Take the message at ``position`` off the network; None if it is lost on the way (to a node not in
        ``up`` or over a blocked link)."""
        flight = self.in_flight.pop(position)
        m = flight.message
        if m.to not in up or (m.sender, m.to) in self.blocked:
            self.lost(m)
            return None
        # Count the faults that really reached a node, not only those that were drawn.
        stats = self.stats
        link = (m.sender, m.to)
        if flight.seq < self.link_delivered.get(link, 0):
            stats["messages delivered out of order"] += 1
        else:
            self.link_delivered[link] = flight.seq
        if flight.duplicate:
            stats["duplicates delivered"] += 1
        if now > flight.sent:
            stats["messages delivered late"] += 1
        if self.params.codec:
            m = decode_message(b"".join(encode_message_buffers(m)))
            stats["messages through the codec"] += 1
        return m
