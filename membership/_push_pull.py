"""Push-pull: full state exchanged over a stream on join, periodically, and to repair what gossip missed.

Beyond memberlist (each is counted): every packet carries the sender's live-member count, and a member that
keeps hearing larger counts than its own push-pulls with that sender (``divergence_syncs``); dead members are
retried with push-pull every ``reconnect_interval`` (``reconnects``), as Serf does, so the sides of a healed
partition find each other.
"""

from __future__ import annotations

from membership._table import MemberTable
from membership._transitions import Transitions
from membership._types import Counters, MemberState
from membership._wire import Alive, Dead, Packet, PushPull, StateEntry, Suspect, decode_push_pull, encode_push_pull
from membership.config import MembershipConfig
from membership.errors import MembershipCodecError

__all__ = ["PushPullSync"]

_ALIVE, _DEAD, _LEFT = MemberState.ALIVE, MemberState.DEAD, MemberState.LEFT
_INFINITY = float("inf")


class PushPullSync:
    """Our side of push-pull exchanges, and when to start one and with whom."""

    __slots__ = (
        "_behind_since",
        "_config",
        "_counters",
        "_next_divergence_sync",
        "_push_pulls",
        "_table",
        "_tag",
        "_transitions",
        "next_push_pull_at",
        "next_reconnect_at",
    )

    def __init__(
        self,
        config: MembershipConfig,
        table: MemberTable,
        transitions: Transitions,
        counters: Counters,
        tag: int,
        *,
        first_push_pull_at: float,
        first_reconnect_at: float,
    ) -> None:
        self._config = config
        self._table = table
        self._transitions = transitions
        self._counters = counters
        self._tag = tag
        self._push_pulls: list[str] = []
        self._behind_since: float | None = None
        self._next_divergence_sync = -_INFINITY
        self.next_push_pull_at = first_push_pull_at
        self.next_reconnect_at = first_reconnect_at

    def take_push_pulls(self) -> list[str]:
        targets, self._push_pulls = self._push_pulls, []
        return targets

    def deadline(self) -> float:
        return min(self.next_push_pull_at, self.next_reconnect_at)

    def tick(self, now: float) -> None:
        """Pick the periodic push-pull peer and the dead member to retry, when due."""
        table = self._table
        if now >= self.next_push_pull_at:
            self.next_push_pull_at = now + self._config.push_pull_period(table.live)
            local_id = table.local_id
            peers = table.random_nodes(1, lambda node_id, node: node_id != local_id and node.state == _ALIVE)
            if peers:
                self._push_pulls.append(peers[0].addr)
        if now >= self.next_reconnect_at:
            self.next_reconnect_at = now + self._config.reconnect_interval
            dead = table.random_nodes(1, lambda node_id, node: node.state == _DEAD)
            if dead:
                self._counters.reconnects += 1
                self._push_pulls.append(dead[0].addr)

    def check_divergence(self, now: float, packet: Packet, src_addr: str) -> None:
        """Push-pull with a sender that has kept knowing more live members than we do.

        Gossip reaches each member with high probability, not certainty; a member that missed a join keeps
        seeing higher counts from everyone. Counts differ briefly while any news spreads, hence the delay.
        """
        if packet.sender_members <= self._table.live or packet.sender == self._table.local_id:
            self._behind_since = None
            return
        if self._behind_since is None:
            self._behind_since = now
            return
        delay = self._config.divergence_sync_delay
        if now - self._behind_since >= delay and now >= self._next_divergence_sync:
            node = self._table.nodes.get(packet.sender)
            self._push_pulls.append(node.addr if node is not None else src_addr)
            self._behind_since = None
            self._next_divergence_sync = now + delay
            self._counters.divergence_syncs += 1

    def request(self, *, join: bool) -> bytes:
        """Our full state, to send to a member (the first half of a push-pull)."""
        data = self._encode_state(join=join)
        self._counters.push_pulls_started += 1
        self._counters.stream_bytes_out += len(data)
        return data

    def serve(self, now: float, data: bytes) -> bytes | None:
        """Merge a requester's state and return ours, or None if the request is refused."""
        state = self._accept_state(data)
        if state is None:
            return None
        # Reply with the state from before the merge, so the requester is not sent its own news back.
        reply = self._encode_state(join=False)
        self._counters.push_pulls_served += 1
        self._counters.stream_bytes_out += len(reply)
        self._merge(now, state, None)  # the requester's address cannot be checked: all of it is third-party
        return reply

    def absorb_reply(self, now: float, data: bytes, from_addr: str | None) -> bool:
        """Merge the reply to our push-pull with ``from_addr``; False if it was refused."""
        state = self._accept_state(data)
        if state is None:
            return False
        self._merge(now, state, from_addr)
        return True

    def _encode_state(self, *, join: bool) -> bytes:
        nodes = self._table.nodes.values()
        entries = tuple(StateEntry(n.incarnation, n.meta, n.addr, n.state) for n in nodes)
        data = encode_push_pull(PushPull(self._tag, self._table.local_id, join, entries))
        if len(data) > self._config.max_push_pull_bytes:
            raise MembershipCodecError(f"push-pull state of {len(data)} bytes exceeds max_push_pull_bytes")
        return data

    def _accept_state(self, data: bytes) -> PushPull | None:
        counters = self._counters
        counters.stream_bytes_in += len(data)
        if len(data) > self._config.max_push_pull_bytes:
            counters.malformed_dropped += 1
            return None
        try:
            state = decode_push_pull(data)
        except MembershipCodecError:
            counters.malformed_dropped += 1
            return None
        if state.cluster_tag != self._tag:
            counters.foreign_cluster_dropped += 1
            return None
        if state.sender not in self._table.nodes and not any(
            entry.meta.node_id == state.sender and entry.state == _ALIVE for entry in state.entries
        ):
            counters.unknown_sender_dropped += 1
            return None
        return state

    def _merge(self, now: float, state: PushPull, from_addr: str | None) -> None:
        transitions = self._transitions
        for entry in state.entries:
            node_id = entry.meta.node_id
            if entry.state == _ALIVE:
                # Only the replier's own entry, naming the address we connected to, is first-hand.
                first_hand = node_id == state.sender and entry.gossip_addr == from_addr
                alive = Alive(entry.incarnation, entry.meta, entry.gossip_addr)
                transitions.on_alive(now, alive, first_hand=first_hand)
            elif entry.state == _LEFT:
                transitions.on_dead(now, Dead(entry.incarnation, node_id, node_id))
            else:
                # A member the peer thinks dead is only suspected here: we may still reach it.
                transitions.on_suspect(now, Suspect(entry.incarnation, node_id, state.sender))
