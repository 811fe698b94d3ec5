"""The SWIM protocol core: :class:`SwimCore` holds one member's protocol state and routes what arrives.

:class:`SwimCore` does no I/O and never reads a clock: the caller passes the time (seconds) into every call,
hands it received bytes, and collects what it wants sent (:meth:`SwimCore.take_packets`,
:meth:`SwimCore.take_push_pulls`) and what changed (:meth:`SwimCore.take_events`). Randomness comes from an
injected generator, so a seeded simulation replays exactly. The runtime and the simulator drive the same code.

The protocol follows SWIM with the Lifeguard refinements, as in hashicorp/memberlist, plus a few cheap repairs
for the gaps of probabilistic gossip (each is counted). Each concern has its own module:

* ``_table``: the member table, the probe order and the events;
* ``_probe``: probes, indirect probes and nacks (failure detection);
* ``_transitions``: alive, suspect and dead news, suspicion timers and refutation;
* ``_outbox``: outgoing packets and the gossip piggybacked on them;
* ``_push_pull``: full-state exchange on join, periodically, on divergence and to reconnect with the dead.

Who is heard: packets and push-pull states carry the cluster's tag and the sender's node id. Another
cluster's packets are dropped. A packet must come from its sender's known gossip address, or carry the
sender's own alive message naming the address it came from: that is how a joining node introduces itself
(a push-pull state always does) and how a restarted one announces its new address. What the news inside may
change depends on who tells it (see ``_transitions``): a third party never re-points a known member.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from membership._awareness import Awareness
from membership._outbox import Outbox
from membership._probe import Prober
from membership._push_pull import PushPullSync
from membership._table import MemberTable, Node
from membership._transitions import Transitions
from membership._types import Counters, Member, MemberEvent, MemberMeta, MemberState, check_address
from membership._wire import (
    Ack,
    Alive,
    Dead,
    IndirectPing,
    Message,
    Nack,
    Packet,
    Ping,
    Suspect,
    cluster_tag,
    decode_packet,
    encode_message,
)
from membership.config import MembershipConfig
from membership.errors import MembershipCodecError

__all__ = ["SwimCore"]

_ALIVE, _SUSPECT = MemberState.ALIVE, MemberState.SUSPECT
_INFINITY = float("inf")


class SwimCore:
    """One member's view of the cluster and its side of the protocol, driven by the caller's clock.

    Drive it with :meth:`tick` at :meth:`next_deadline` (or later), :meth:`receive` for each datagram, and
    the push-pull methods for TCP state exchanges; after each call, send what :meth:`take_packets` and
    :meth:`take_push_pulls` return and deliver :meth:`take_events`.
    """

    def __init__(
        self,
        config: MembershipConfig,
        meta: MemberMeta,
        gossip_addr: str,
        *,
        rng: random.Random,
        now: float,
        incarnation: int = 0,
        counters: Counters | None = None,
    ) -> None:
        check_address("gossip_addr", gossip_addr)
        self._config = config
        self._tag = cluster_tag(config.cluster_name)
        self._local_id = meta.node_id
        self.counters = counters if counters is not None else Counters()
        # The order of these draws is part of what a seed replays.
        seq = rng.randrange(1 << 32)
        # Stagger periodic work so members started together do not probe and gossip in lockstep.
        first_probe_at = now + rng.random() * config.probe_interval
        first_gossip_at = now + rng.random() * config.gossip_interval
        first_push_pull_at = (
            now + rng.random() * config.push_pull_interval if config.push_pull_interval > 0 else _INFINITY
        )
        first_reconnect_at = (
            now + rng.random() * config.reconnect_interval if config.reconnect_interval > 0 else _INFINITY
        )
        self._awareness = Awareness(config.awareness_max_multiplier)
        self._table = MemberTable(config, self._local_id, rng)
        self._outbox = Outbox(config, self._table, self.counters, self._tag, first_gossip_at=first_gossip_at)
        self._transitions = Transitions(config, self._table, self._outbox, self._awareness, self.counters)
        self._prober = Prober(
            config,
            self._table,
            self._outbox,
            self._transitions,
            self._awareness,
            self.counters,
            seq=seq,
            first_probe_at=first_probe_at,
        )
        self._push_pull = PushPullSync(
            config,
            self._table,
            self._transitions,
            self.counters,
            self._tag,
            first_push_pull_at=first_push_pull_at,
            first_reconnect_at=first_reconnect_at,
        )
        self._transitions.greet = self._prober.greet
        self._table.add(Node(meta, gossip_addr, incarnation, _ALIVE, now, confirmed=True), now)
        # Our first gossip announces us, and introduces us to members that do not know us yet.
        self._outbox.queue.put(self._local_id, encode_message(Alive(incarnation, meta, gossip_addr)))

    # Reading the member table

    @property
    def config(self) -> MembershipConfig:
        return self._config

    @property
    def node_id(self) -> int:
        return self._local_id

    @property
    def local_member(self) -> Member:
        return self._table.local.snapshot()

    def members(self) -> list[Member]:
        """Alive and suspect members, this one included, by node id."""
        nodes = self._table.nodes
        return [nodes[i].snapshot() for i in sorted(nodes) if nodes[i].state <= _SUSPECT]

    def all_members(self) -> list[Member]:
        """Every member still remembered, dead and left ones included, by node id."""
        nodes = self._table.nodes
        return [nodes[i].snapshot() for i in sorted(nodes)]

    def member(self, node_id: int) -> Member | None:
        node = self._table.nodes.get(node_id)
        return None if node is None else node.snapshot()

    def state_of(self, node_id: int) -> MemberState | None:
        """The member's state without building a snapshot (cheap, for large simulations)."""
        node = self._table.nodes.get(node_id)
        return None if node is None else node.state

    @property
    def num_members(self) -> int:
        """Alive and suspect members, this one included (N in the protocol's log(N) scaling)."""
        return self._table.live

    @property
    def health_score(self) -> int:
        """Lifeguard local health: 0 is healthy; probe interval and timeout are stretched by score + 1."""
        return self._awareness.score

    @property
    def has_left(self) -> bool:
        return self._transitions.left

    @property
    def leave_propagated(self) -> bool:
        """After :meth:`leave`: the leave message has been sent its full count, or nobody is left to tell."""
        return self._transitions.left and (self._table.live == 0 or self._local_id not in self._outbox.queue)

    @property
    def pending_gossip(self) -> int:
        return len(self._outbox.queue)

    # Outputs

    def take_packets(self) -> list[tuple[str, bytes]]:
        """Datagrams to send, as (``host:port``, bytes)."""
        return self._outbox.take_packets()

    def take_push_pulls(self) -> list[str]:
        """Members (``host:port``) to push-pull with, over a stream: periodic syncs and address checks.

        Pass the address back to :meth:`handle_push_pull_response` with the reply.
        """
        return self._push_pull.take_push_pulls() + self._transitions.take_address_checks()

    def take_events(self) -> list[MemberEvent]:
        return self._table.take_events()

    def next_deadline(self) -> float:
        """The earliest time :meth:`tick` has work to do."""
        deadline = min(self._prober.deadline(), self._outbox.deadline(), self._transitions.deadline())
        if not self._transitions.left:
            deadline = min(deadline, self._prober.next_probe_at, self._push_pull.deadline())
        return deadline

    # Inputs

    def tick(self, now: float) -> None:
        """Run every timer that is due at ``now``."""
        transitions = self._transitions
        if transitions.suspicions:
            transitions.expire_suspicions(now)
        self._prober.tick(now, may_start=not transitions.left)
        self._outbox.tick(now)
        if not transitions.left:
            self._push_pull.tick(now)

    def receive(self, now: float, src_addr: str, data: bytes) -> None:
        """Handle one datagram from ``src_addr``. Malformed or unwanted packets are counted and dropped."""
        self.tick(now)
        counters = self.counters
        counters.packets_in += 1
        counters.bytes_in += len(data)
        if len(data) > self._config.max_packet_bytes:
            counters.malformed_dropped += 1
            return
        try:
            packet = decode_packet(data)
        except MembershipCodecError:
            counters.malformed_dropped += 1
            return
        if packet.cluster_tag != self._tag:
            counters.foreign_cluster_dropped += 1
            return
        sender = self._table.nodes.get(packet.sender)
        if (sender is None or sender.addr != src_addr) and not _introduces_sender(packet, src_addr):
            # Another address speaking as a member we know is a forgery, or a restart it has not announced.
            if sender is None:
                counters.unknown_sender_dropped += 1
            else:
                counters.spoofed_dropped += 1
            return
        if sender is not None and sender.addr == src_addr and not sender.confirmed:
            self._table.confirm(sender, now)
        counters.messages_in += len(packet.messages)
        # Membership news first, so a reply (an ack) carries whatever it made us queue, such as a refutation.
        for message in packet.messages:
            if isinstance(message, Alive | Suspect | Dead):
                self._handle(now, src_addr, packet.sender, message)
        for message in packet.messages:
            if not isinstance(message, Alive | Suspect | Dead):
                self._handle(now, src_addr, packet.sender, message)
        if self._config.divergence_sync_delay > 0 and not self._transitions.left:
            self._push_pull.check_divergence(now, packet, src_addr)

    def push_pull_request(self, *, join: bool) -> bytes:
        """Our full state, to send to a member (the first half of a push-pull)."""
        return self._push_pull.request(join=join)

    def handle_push_pull_request(self, now: float, data: bytes) -> bytes | None:
        """Serve a push-pull: merge the remote state and return ours, or None if the request is refused."""
        self.tick(now)
        return self._push_pull.serve(now, data)

    def handle_push_pull_response(self, now: float, data: bytes, from_addr: str | None = None) -> bool:
        """Merge the reply to our push-pull with ``from_addr`` (the address we connected to); False if refused.

        The replier's own entry is first-hand news when it names ``from_addr``: that is how an address
        change a third party reported is confirmed by the member itself.
        """
        self.tick(now)
        return self._push_pull.absorb_reply(now, data, from_addr)

    def update_meta(self, now: float, meta: MemberMeta) -> None:
        """Publish new metadata for this member under a bumped incarnation."""
        self._transitions.publish_meta(now, meta)

    def leave(self, now: float) -> None:
        """Leave gracefully: tell the cluster, stop probing, keep gossiping until the news is out."""
        if self._transitions.left:
            return
        self._prober.cancel()
        self._transitions.leave(now)
        # Spread it now rather than at the next gossip tick.
        self._outbox.gossip(now)

    def preload(self, now: float, members: Iterable[Member]) -> None:
        """Install live members known from elsewhere (a simulation's converged start) without gossiping.

        Members already known are left alone; the usual JOIN events are emitted.
        """
        table = self._table
        for member in members:
            if member.node_id in table.nodes or not member.is_live:
                continue
            table.add(Node(member.meta, member.gossip_addr, member.incarnation, _ALIVE, now, confirmed=True), now)

    def _handle(self, now: float, src_addr: str, sender: int, message: Message) -> None:
        match message:
            case Ping():
                self._prober.on_ping(src_addr, message)
            case Ack(seq):
                self._prober.on_ack(src_addr, seq)
            case Nack(seq):
                self._prober.on_nack(src_addr, seq)
            case IndirectPing():
                self._prober.on_indirect_ping(now, src_addr, message)
            case Alive():
                first_hand = message.node == sender and message.gossip_addr == src_addr
                self._transitions.on_alive(now, message, first_hand=first_hand)
            case Suspect() | Dead():
                if not self._transitions.correct_stale(src_addr, message):
                    if isinstance(message, Suspect):
                        self._transitions.on_suspect(now, message, src_addr)
                    else:
                        self._transitions.on_dead(now, message, src_addr)


def _introduces_sender(packet: Packet, src_addr: str) -> bool:
    """The packet carries its sender's own alive message, naming the address the packet came from."""
    return any(isinstance(m, Alive) and m.node == packet.sender and m.gossip_addr == src_addr for m in packet.messages)
