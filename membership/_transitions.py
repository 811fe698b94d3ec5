"""How news changes the member table: alive, suspect and dead messages, suspicion timers and refutation.

As memberlist's ``aliveNode``, ``suspectNode`` and ``deadNode``: news about an older incarnation than the one
we hold is ignored. A suspicion times out after a time that grows with log(N) and shrinks as other members
confirm it, and a suspected member refutes it by raising its incarnation. Beyond memberlist (each counted):

* a refutation is also sent straight to the accuser, and news older than what we hold is answered with the
  newer alive message (``stale_corrections``);
* a suspicion is repeated once halfway to its timeout (``suspicion_reannouncements``), so a member that
  missed a refutation hears it from those that did not.
"""

from __future__ import annotations

from membership._awareness import Awareness
from membership._outbox import Outbox
from membership._suspicion import Suspicion
from membership._table import MemberTable, Node
from membership._types import Counters, EventKind, MemberMeta, MemberState
from membership._wire import Alive, Dead, Suspect, encode_message
from membership.config import MembershipConfig
from membership.errors import LifecycleError, MetadataError

__all__ = ["Transitions", "local_alive_frame"]

_ALIVE, _SUSPECT, _DEAD, _LEFT = MemberState.ALIVE, MemberState.SUSPECT, MemberState.DEAD, MemberState.LEFT
_INFINITY = float("inf")
# Incarnations travel as u32 and saturate there: a forged accusation at the top must not crash a member.
_MAX_INCARNATION = 2**32 - 1


class Transitions:
    """Applies membership news to the table, queues it for gossip, and defends this member's own record."""

    __slots__ = ("_awareness", "_config", "_counters", "_outbox", "_table", "left", "suspicions")

    def __init__(
        self,
        config: MembershipConfig,
        table: MemberTable,
        outbox: Outbox,
        awareness: Awareness,
        counters: Counters,
    ) -> None:
        self._config = config
        self._table = table
        self._outbox = outbox
        self._awareness = awareness
        self._counters = counters
        self.suspicions: dict[int, Suspicion] = {}
        self.left = False

    def deadline(self) -> float:
        deadline = _INFINITY
        for suspicion in self.suspicions.values():
            deadline = min(deadline, suspicion.deadline, suspicion.reannounce_at)
        return deadline

    def expire_suspicions(self, now: float) -> None:
        queue = self._outbox.queue
        for node_id, suspicion in self.suspicions.items():
            if now >= suspicion.reannounce_at:
                # Repeat the accusation once: a holder that missed the refutation is corrected by members
                # that know better (correct_stale), and the target hears it again if it has not yet.
                suspicion.reannounce_at = _INFINITY
                self._counters.suspicion_reannouncements += 1
                repeat = Suspect(suspicion.incarnation, node_id, suspicion.accuser)
                queue.put(node_id, encode_message(repeat))
        for node_id in [i for i, s in self.suspicions.items() if now >= s.deadline]:
            del self.suspicions[node_id]
            node = self._table.nodes.get(node_id)
            if node is not None and node.state == _SUSPECT:
                self._counters.deaths_declared += 1
                self.on_dead(now, Dead(node.incarnation, node_id, self._table.local_id))

    def correct_stale(self, src_addr: str, accusation: Suspect | Dead) -> bool:
        """Answer an accusation older than the alive news we hold by sending that news back; True if stale.

        A member that hears a suspicion after the refutation has finished spreading would otherwise keep
        its timer running until it kills a live member. Its own re-gossip of the old suspicion now reaches
        members that know better, and they correct it.
        """
        node = self._table.nodes.get(accusation.node)
        if node is None or node.state != _ALIVE or accusation.incarnation >= node.incarnation:
            return False
        self._counters.stale_corrections += 1
        self._outbox.send(src_addr, [encode_message(Alive(node.incarnation, node.meta, node.addr))])
        return True

    def on_alive(self, now: float, alive: Alive) -> None:
        table = self._table
        node_id = alive.node
        is_local = node_id == table.local_id
        if is_local and self.left:
            return  # an old alive must not bring us back after leave()
        node = table.nodes.get(node_id)
        if node is None:
            self._outbox.queue.put(node_id, encode_message(alive))
            table.add(Node(alive.meta, alive.gossip_addr, alive.incarnation, _ALIVE, now), now)
            return
        moved = alive.gossip_addr != node.addr
        if moved and node.state <= _SUSPECT:
            # A live member keeps its address; another process claiming its id is a misconfiguration.
            self._counters.conflicts += 1
            return
        if is_local:
            if alive.incarnation < node.incarnation:
                return
            if alive.incarnation == node.incarnation and alive.meta == node.meta:
                return  # our own news, gossiped back to us
            self._refute(alive.incarnation)
            return
        # A dead member may come back at a new address (restarted) even with a lower incarnation.
        if alive.incarnation <= node.incarnation and not moved:
            return
        self.suspicions.pop(node_id, None)
        self._outbox.queue.put(node_id, encode_message(alive))
        old_state = node.state
        changed = moved or alive.meta != node.meta
        node.incarnation = alive.incarnation
        node.meta = alive.meta
        node.addr = alive.gossip_addr
        if old_state >= _DEAD:
            table.set_state(node, _ALIVE, now)
            table.emit(EventKind.JOIN, node, now)
            return
        if old_state == _SUSPECT:
            table.set_state(node, _ALIVE, now)
            table.emit(EventKind.ALIVE, node, now)
        if changed:
            table.emit(EventKind.UPDATE, node, now)

    def on_suspect(self, now: float, suspect: Suspect) -> None:
        table = self._table
        node = table.nodes.get(suspect.node)
        if node is None or suspect.incarnation < node.incarnation:
            return
        suspicion = self.suspicions.get(suspect.node)
        if suspicion is not None:
            # Re-gossip new confirmations so independent accusers keep shortening everyone's timer.
            if suspicion.confirm(suspect.accuser):
                self._counters.suspicion_confirmations += 1
                self._outbox.queue.put(suspect.node, encode_message(suspect))
            return
        if node.state != _ALIVE:
            return
        if suspect.node == table.local_id:
            self._refute(suspect.incarnation, accuser=suspect.accuser)
            return
        self._outbox.queue.put(suspect.node, encode_message(suspect))
        node.incarnation = suspect.incarnation
        table.set_state(node, _SUSPECT, now)
        self._counters.suspicions += 1
        table.emit(EventKind.SUSPECT, node, now)
        n = table.live
        # Expect confirmations only when enough other members exist to give them (minus us and the suspect).
        expected = max(0, self._config.suspicion_mult - 2)
        if n - 2 < expected:
            expected = 0
        shortest, longest = self._config.suspicion_timeouts(n)
        self.suspicions[suspect.node] = Suspicion(
            suspect.accuser, suspect.incarnation, expected, shortest, longest, now
        )

    def on_dead(self, now: float, dead: Dead) -> None:
        table = self._table
        node = table.nodes.get(dead.node)
        if node is None or dead.incarnation < node.incarnation:
            return
        self.suspicions.pop(dead.node, None)
        if node.state >= _DEAD:
            return
        if dead.node == table.local_id and not self.left:
            self._refute(dead.incarnation, accuser=dead.accuser)
            return
        self._outbox.queue.put(dead.node, encode_message(dead))
        node.incarnation = dead.incarnation
        if dead.accuser == dead.node:
            table.set_state(node, _LEFT, now)
            self._counters.leaves += 1
            table.emit(EventKind.LEAVE, node, now)
        else:
            table.set_state(node, _DEAD, now)
            self._counters.deaths += 1
            table.emit(EventKind.DEAD, node, now)

    def publish_meta(self, now: float, meta: MemberMeta) -> None:
        """Publish new metadata for this member under a bumped incarnation."""
        if self.left:
            raise LifecycleError("this member has left; its metadata can no longer change")
        local_id = self._table.local_id
        if meta.node_id != local_id:
            raise MetadataError("node_id", f"cannot change from {local_id} to {meta.node_id}")
        node = self._table.local
        if meta == node.meta:
            return
        node.meta = meta
        node.incarnation = min(node.incarnation + 1, _MAX_INCARNATION)
        self._outbox.queue.put(local_id, encode_message(Alive(node.incarnation, meta, node.addr)))
        self._table.emit(EventKind.UPDATE, node, now)

    def leave(self, now: float) -> None:
        """Mark this member as left, and queue the news."""
        self.left = True
        local_id = self._table.local_id
        self.on_dead(now, Dead(self._table.local.incarnation, local_id, local_id))

    def _refute(self, accused_incarnation: int, *, accuser: int | None = None) -> None:
        table = self._table
        node = table.local
        node.incarnation = min(max(node.incarnation, accused_incarnation) + 1, _MAX_INCARNATION)
        # Being accused is evidence that we are the slow one (Lifeguard).
        self._awareness.apply_delta(1)
        self._counters.refutations += 1
        self._outbox.queue.put(table.local_id, local_alive_frame(node))
        # The accuser's timer is the one that would kill us; do not leave reaching it to chance.
        accusing = table.nodes.get(accuser) if accuser is not None and accuser != table.local_id else None
        if accusing is not None and accusing.state <= _SUSPECT:
            self._outbox.send(accusing.addr, [local_alive_frame(node)])


def local_alive_frame(local: Node) -> bytes:
    """Our own alive message, encoded as it stands."""
    return encode_message(Alive(local.incarnation, local.meta, local.addr))
