"""Outgoing datagrams, each topped up with queued gossip, and the gossip rounds that send what is left.

Alive, suspect and dead news is piggybacked on every packet, each message ``retransmit_mult * log(N)``
times, and also gossiped to a few random members while any is queued.
"""

from __future__ import annotations

from membership._queue import BroadcastQueue
from membership._table import MemberTable, Node
from membership._types import Counters, MemberState
from membership._wire import HEADER_BYTES, encode_packet
from membership.config import MembershipConfig

__all__ = ["Outbox"]

_SUSPECT = MemberState.SUSPECT
_INFINITY = float("inf")


class Outbox:
    """The datagrams this member has to send, and the gossip queue they carry."""

    __slots__ = (
        "_config",
        "_counters",
        "_limit",
        "_limit_for",
        "_packets",
        "_table",
        "_tag",
        "next_gossip_at",
        "queue",
    )

    def __init__(
        self,
        config: MembershipConfig,
        table: MemberTable,
        counters: Counters,
        tag: int,
        *,
        first_gossip_at: float,
    ) -> None:
        self._config = config
        self._table = table
        self._counters = counters
        self._tag = tag
        self.queue = BroadcastQueue()
        self._limit_for, self._limit = -1, 0  # retransmit limit, cached per live-member count
        self._packets: list[tuple[str, bytes]] = []
        self.next_gossip_at = first_gossip_at

    def take_packets(self) -> list[tuple[str, bytes]]:
        packets, self._packets = self._packets, []
        return packets

    def deadline(self) -> float:
        return self.next_gossip_at if self.queue else _INFINITY

    def tick(self, now: float) -> None:
        if now >= self.next_gossip_at:
            self.next_gossip_at = now + self._config.gossip_interval
            self.gossip(now)

    def gossip(self, now: float) -> None:
        """Send queued gossip to a few random members, as long as any is left."""
        if not self.queue:
            return
        dead_horizon = now - self._config.gossip_to_the_dead_time
        local_id = self._table.local_id

        def wanted(node_id: int, node: Node) -> bool:
            if node_id == local_id:
                return False
            # Gossip to the recently dead and left too, so a member wrongly declared dead, or whose leave was
            # forged, hears it and refutes.
            return node.state <= _SUSPECT or node.changed_at >= dead_horizon

        for node in self._table.random_nodes(self._config.gossip_nodes, wanted):
            if not self.queue:
                break
            self.send(node.addr, [])

    def send(self, addr: str, frames: list[bytes]) -> None:
        """Send ``frames`` to ``addr`` with as much queued gossip as fits; nothing if both are empty."""
        live = self._table.live
        budget = self._config.max_packet_bytes - HEADER_BYTES - sum(len(f) for f in frames)
        if self._limit_for != live:
            self._limit_for, self._limit = live, self._config.retransmit_limit(live)
        counters = self._counters
        gossip = self.queue.take(budget, self._limit)
        if gossip:
            frames = frames + gossip
            counters.gossip_messages_out += len(gossip)
        elif not frames:
            return
        data = encode_packet(self._tag, self._table.local_id, live, frames)
        self._packets.append((addr, data))
        counters.packets_out += 1
        counters.bytes_out += len(data)
