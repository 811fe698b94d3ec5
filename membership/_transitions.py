"""How news changes the member table: alive, suspect and dead messages, suspicion timers and refutation.

As memberlist's ``aliveNode``, ``suspectNode`` and ``deadNode``: news about an older incarnation than the one
we hold is ignored. A suspicion times out after a time that grows with log(N) and shrinks as other members
confirm it, and a suspected member refutes it by raising its incarnation. Beyond memberlist (each counted):

* a refutation is also sent straight to the accuser, and news older than what we hold is answered with the
  newer alive message (``stale_corrections``);
* a suspicion is repeated once halfway to its timeout (``suspicion_reannouncements``), so a member that
  missed a refutation hears it from those that did not.

Whom to believe (issue 13). Packets are checked against the sender's known gossip address before they get
here (``_state``); what remains is whether the news is *first-hand* (a member's own alive message, arriving
from the address it names, or in the reply to a push-pull we opened to that address) or relayed by a third
party. A third party may introduce a member we do not know, suspect or kill one, or spread its newer alive
news at the addresses we hold; it may never re-point a known member (gossip, client or peer address), and
it may not move an incarnation more than ``max_incarnation_jump`` ahead. Either claim makes us ask the
member instead: we push-pull with the gossip address, and only the member's own answer from there is
believed. A member first heard of second-hand is greeted with a ping and stays unconfirmed (hearsay) until
it answers from its address. A live member never moves (memberlist's conflict rule); a dead one may come
back elsewhere. Incarnations compare as serial numbers (``_incarnation``), and a member refutes just past
whatever incarnation an accusation names, so no number leaves it without a refutation.
"""

from __future__ import annotations

from collections.abc import Callable

from membership._awareness import Awareness
from membership._incarnation import ahead, is_at_least, is_newer, successor
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
# A reported address change is checked with the member at most this often (in probe intervals) per member.
_CHECK_BACKOFF_PROBES = 5


class Transitions:
    """Applies membership news to the table, queues it for gossip, and defends this member's own record."""

    __slots__ = (
        "_awareness",
        "_checked_at",
        "_config",
        "_counters",
        "_outbox",
        "_table",
        "address_checks",
        "greet",
        "left",
        "suspicions",
    )

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
        # Gossip addresses to push-pull with, to hear an address change from the member itself.
        self.address_checks: list[str] = []
        self._checked_at: dict[int, float] = {}  # node id -> when we last checked a change reported for it
        # Pings a member we heard of second-hand, so that its answer confirms it (set by the core).
        self.greet: Callable[[str, int], None] = lambda addr, node_id: None

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
        if accusation.node == self._table.local_id:
            return False  # on_suspect and on_dead defend us
        if node is None or node.state != _ALIVE or is_at_least(accusation.incarnation, node.incarnation):
            return False
        self._counters.stale_corrections += 1
        self._outbox.send(src_addr, [encode_message(Alive(node.incarnation, node.meta, node.addr))])
        return True

    def take_address_checks(self) -> list[str]:
        checks, self.address_checks = self.address_checks, []
        return checks

    def on_alive(self, now: float, alive: Alive, *, first_hand: bool) -> None:
        """Apply alive news; ``first_hand`` when it comes from the member itself, at the address it names."""
        table = self._table
        node_id = alive.node
        is_local = node_id == table.local_id
        if is_local and self.left:
            return  # an old alive must not bring us back after leave()
        node = table.nodes.get(node_id)
        if node is None:
            # First news of a member, from anyone: how joins spread. Hearsay stays unconfirmed until the
            # member answers us from that address; a fake one never does, and dies.
            self._outbox.queue.put(node_id, encode_message(alive))
            table.add(Node(alive.meta, alive.gossip_addr, alive.incarnation, _ALIVE, now, confirmed=first_hand), now)
            if not first_hand:
                self.greet(alive.gossip_addr, node_id)
            return
        if is_local:
            if alive.incarnation == node.incarnation and alive.meta == node.meta and alive.gossip_addr == node.addr:
                return  # our own news, gossiped back to us
            if 0 < ahead(node.incarnation, alive.incarnation) <= self._config.max_incarnation_jump:
                return  # our own older news
            self._refute(alive.incarnation)
            return
        moved = alive.gossip_addr != node.addr
        if moved and node.state <= _SUSPECT:
            # A live member keeps its address; another process claiming its id is a misconfiguration.
            self._counters.conflicts += 1
            return
        repoints = moved or (alive.meta.client_addr, alive.meta.peer_addr) != (
            node.meta.client_addr,
            node.meta.peer_addr,
        )
        if first_hand and not moved and not node.confirmed:
            table.confirm(node, now)
        if not first_hand:
            if not is_newer(alive.incarnation, node.incarnation):
                return
            if self._implausible(now, alive.incarnation, node):
                return
            if repoints:
                self._ask_member(now, node_id, alive.gossip_addr)
                return
        # A dead member may come back at a new address (restarted) even with a lower incarnation.
        elif not is_newer(alive.incarnation, node.incarnation) and not (moved and node.state >= _DEAD):
            if not is_at_least(alive.incarnation, node.incarnation):
                self._correct_member(node)
            return
        self.suspicions.pop(node_id, None)
        self._outbox.queue.put(node_id, encode_message(alive))
        old_state = node.state
        changed = moved or alive.meta != node.meta
        node.incarnation = alive.incarnation
        node.meta = alive.meta
        node.addr = alive.gossip_addr
        node.confirmed = first_hand or node.confirmed
        if old_state >= _DEAD:
            table.set_state(node, _ALIVE, now)
            table.emit(EventKind.JOIN, node, now)
            return
        if old_state == _SUSPECT:
            table.set_state(node, _ALIVE, now)
            table.emit(EventKind.ALIVE, node, now)
        if changed:
            table.emit(EventKind.UPDATE, node, now)

    def _correct_member(self, node: Node) -> None:
        """Tell a member, whose own news is older than ours, what we hold of it, so that it refutes.

        Otherwise a third party's alive message at a higher (plausible) incarnation would hide the member's
        own later news until a push-pull happened to pair the two.
        """
        self._counters.stale_corrections += 1
        if node.state <= _SUSPECT:
            frame = encode_message(Alive(node.incarnation, node.meta, node.addr))
        else:
            frame = encode_message(Dead(node.incarnation, node.meta.node_id, self._table.local_id))
        self._outbox.send(node.addr, [frame])

    def _ask_member(self, now: float, node_id: int, gossip_addr: str) -> None:
        """Push-pull with ``gossip_addr``: only the member's own answer from there is believed beyond the rules.

        Asked when a third party reports an address change, or an incarnation too far ahead (the member may
        really be there, after refuting forged news told only to it).
        """
        checked = self._checked_at
        if now < checked.get(node_id, -_INFINITY) + _CHECK_BACKOFF_PROBES * self._config.probe_interval:
            return
        if len(checked) > len(self._table.nodes):
            for stale in [i for i in checked if i not in self._table.nodes]:
                del checked[stale]
        checked[node_id] = now
        self._counters.address_checks += 1
        self.address_checks.append(gossip_addr)

    def _implausible(self, now: float, incarnation: int, node: Node) -> bool:
        """Third-party news that moves a member's incarnation too far ahead: dropped, and the member asked."""
        if ahead(incarnation, node.incarnation) > self._config.max_incarnation_jump:
            self._counters.implausible_dropped += 1
            self._ask_member(now, node.meta.node_id, node.addr)
            return True
        return False

    def on_suspect(self, now: float, suspect: Suspect, src_addr: str | None = None) -> None:
        table = self._table
        if suspect.node == table.local_id:
            if not self.left:
                self._defend(src_addr, suspect.incarnation, suspect.accuser)
            return
        node = table.nodes.get(suspect.node)
        if node is None or not is_at_least(suspect.incarnation, node.incarnation):
            return
        if self._implausible(now, suspect.incarnation, node):
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

    def on_dead(self, now: float, dead: Dead, src_addr: str | None = None) -> None:
        table = self._table
        if dead.node == table.local_id and not self.left:
            self._defend(src_addr, dead.incarnation, dead.accuser)
            return
        node = table.nodes.get(dead.node)
        if node is None or not is_at_least(dead.incarnation, node.incarnation):
            return
        if dead.node != table.local_id and self._implausible(now, dead.incarnation, node):
            return
        self.suspicions.pop(dead.node, None)
        if node.state >= _DEAD:
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
        node.incarnation = successor(node.incarnation)
        self._outbox.queue.put(local_id, encode_message(Alive(node.incarnation, meta, node.addr)))
        self._table.emit(EventKind.UPDATE, node, now)

    def leave(self, now: float) -> None:
        """Mark this member as left, and queue the news."""
        self.left = True
        local_id = self._table.local_id
        self.on_dead(now, Dead(self._table.local.incarnation, local_id, local_id))

    def _defend(self, src_addr: str | None, accused: int, accuser: int) -> None:
        """Answer an accusation of this member, whatever incarnation it names.

        Slightly older than ours: our alive message answers it. Otherwise (ours, newer, or so far from ours
        that the accuser would not take our number as newer) we refute just past it, which every member that
        believed it takes as newer: no incarnation, 2**32 - 1 included, leaves us without a refutation.
        """
        node = self._table.local
        if 0 < ahead(node.incarnation, accused) <= self._config.max_incarnation_jump:
            if src_addr is not None:
                self._counters.stale_corrections += 1
                self._outbox.send(src_addr, [local_alive_frame(node)])
            return
        self._refute(accused, accuser=accuser)

    def _refute(self, claimed: int, *, accuser: int | None = None) -> None:
        """Move past ``claimed`` (an accusation, or news of us we did not send)."""
        table = self._table
        node = table.local
        node.incarnation = successor(claimed)
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
