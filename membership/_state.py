"""The SWIM protocol core: the member table, probes, suspicion, gossip and push-pull merging.

:class:`SwimCore` does no I/O and never reads a clock: the caller passes the time (seconds) into every call,
hands it received bytes, and collects what it wants sent (:meth:`SwimCore.take_packets`,
:meth:`SwimCore.take_push_pulls`) and what changed (:meth:`SwimCore.take_events`). Randomness comes from an
injected generator, so a seeded simulation replays exactly. The runtime and the simulator drive the same code.

The protocol follows SWIM with the Lifeguard refinements, as in hashicorp/memberlist:

* each probe interval one member is pinged; if no ack comes within the probe timeout, ``indirect_checks``
  members are asked to ping it, and they nack if they hear nothing, which tells the prober its own network
  is fine (local health awareness);
* a member that misses the whole interval is suspected; the suspicion times out after a time that grows with
  log(N) and shrinks as other members confirm it, and a suspected member refutes it by raising its
  incarnation;
* alive, suspect and dead news is piggybacked on every packet, each message ``retransmit_mult * log(N)``
  times, and also gossiped to a few random members while any is queued;
* full state is exchanged with push-pull on join and periodically.

Beyond memberlist, a few cheap repairs close the gaps of probabilistic gossip (each is counted):

* a direct ping is retried, carrying our alive message, when its ack is late (``probe_retries``);
* a refutation is also sent straight to the accuser, and news older than what we hold is answered with the
  newer alive message (``stale_corrections``); a suspicion is repeated once halfway to its timeout
  (``suspicion_reannouncements``), so a member that missed a refutation hears it from those that did not;
* every packet carries the sender's live-member count; a member that keeps hearing larger counts than its
  own push-pulls with that sender (``divergence_syncs``);
* dead members are retried with push-pull every ``reconnect_interval`` (``reconnects``), as Serf does, so
  the sides of a healed partition find each other.

Who is heard: packets and push-pull states carry the cluster's tag and the sender's node id. Another
cluster's packets are dropped; so are packets from a node id we do not know, unless they carry that node's
own alive message, which is how a joining node introduces itself (a push-pull state always does).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from membership._awareness import Awareness
from membership._queue import BroadcastQueue
from membership._suspicion import Suspicion
from membership._types import (
    Counters,
    EventKind,
    Member,
    MemberEvent,
    MemberMeta,
    MemberState,
    check_address,
)
from membership._wire import (
    HEADER_BYTES,
    Ack,
    Alive,
    Dead,
    IndirectPing,
    Message,
    Nack,
    Packet,
    Ping,
    PushPull,
    StateEntry,
    Suspect,
    cluster_tag,
    decode_packet,
    decode_push_pull,
    encode_message,
    encode_packet,
    encode_push_pull,
)
from membership.config import MembershipConfig
from membership.errors import LifecycleError, MembershipCodecError, MetadataError

__all__ = ["SwimCore"]

_ALIVE, _SUSPECT, _DEAD, _LEFT = MemberState.ALIVE, MemberState.SUSPECT, MemberState.DEAD, MemberState.LEFT
_INFINITY = float("inf")
# Incarnations travel as u32 and saturate there: a forged accusation at the top must not crash a member.
_MAX_INCARNATION = 2**32 - 1
# A helper nacks before the asker's interval ends: the asker sends indirect pings at probe_timeout and gives
# up at probe_interval, which is at least twice as long in both profiles.
_NACK_FRACTION = 0.8


class _Node:
    __slots__ = ("addr", "changed_at", "incarnation", "meta", "state")

    def __init__(self, meta: MemberMeta, addr: str, incarnation: int, state: MemberState, now: float) -> None:
        self.meta = meta
        self.addr = addr
        self.incarnation = incarnation
        self.state = state
        self.changed_at = now

    def snapshot(self) -> Member:
        return Member(self.meta, self.addr, self.incarnation, self.state, self.changed_at)


class _Probe:
    __slots__ = ("ack_deadline", "addr", "end", "expected_nacks", "indirect_sent", "nacks", "seq", "target")

    def __init__(self, target: int, addr: str, seq: int, ack_deadline: float, end: float) -> None:
        self.target = target
        self.addr = addr
        self.seq = seq
        self.ack_deadline = ack_deadline
        self.end = end
        self.indirect_sent = False
        self.expected_nacks = 0
        self.nacks = 0


class _Relay:
    """An indirect ping this node is carrying out for another member."""

    __slots__ = ("expires", "nack_at", "origin_addr", "origin_seq")

    def __init__(self, origin_addr: str, origin_seq: int, nack_at: float, expires: float) -> None:
        self.origin_addr = origin_addr
        self.origin_seq = origin_seq
        self.nack_at = nack_at  # infinity once sent, or if no nack was asked for
        self.expires = expires


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
        self._rng = rng
        self._tag = cluster_tag(config.cluster_name)
        self._local_id = meta.node_id
        self.counters = counters if counters is not None else Counters()
        self._nodes: dict[int, _Node] = {}
        # Every known node id (ours too) in probe order; also sampled for gossip and helper targets.
        self._ids: list[int] = []
        self._probe_index = 0
        self._live = 0
        self._seq = rng.randrange(1 << 32)
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._suspicions: dict[int, Suspicion] = {}
        self._queue = BroadcastQueue()
        self._limit_for, self._limit = -1, 0  # retransmit limit, cached per live-member count
        self._awareness = Awareness(config.awareness_max_multiplier)
        self._packets: list[tuple[str, bytes]] = []
        self._push_pulls: list[str] = []
        self._events: list[MemberEvent] = []
        self._left = False
        self._behind_since: float | None = None
        self._next_divergence_sync = -_INFINITY
        # Stagger periodic work so members started together do not probe and gossip in lockstep.
        self._next_probe_at = now + rng.random() * config.probe_interval
        self._next_gossip_at = now + rng.random() * config.gossip_interval
        self._next_push_pull_at = (
            now + rng.random() * config.push_pull_interval if config.push_pull_interval > 0 else _INFINITY
        )
        self._next_reconnect_at = (
            now + rng.random() * config.reconnect_interval if config.reconnect_interval > 0 else _INFINITY
        )
        self._add(_Node(meta, gossip_addr, incarnation, _ALIVE, now), now)
        # Our first gossip announces us, and introduces us to members that do not know us yet.
        self._queue.put(self._local_id, encode_message(Alive(incarnation, meta, gossip_addr)))

    # Reading the member table

    @property
    def config(self) -> MembershipConfig:
        return self._config

    @property
    def node_id(self) -> int:
        return self._local_id

    @property
    def local_member(self) -> Member:
        return self._nodes[self._local_id].snapshot()

    def members(self) -> list[Member]:
        """Alive and suspect members, this one included, by node id."""
        return [self._nodes[i].snapshot() for i in sorted(self._nodes) if self._nodes[i].state <= _SUSPECT]

    def all_members(self) -> list[Member]:
        """Every member still remembered, dead and left ones included, by node id."""
        return [self._nodes[i].snapshot() for i in sorted(self._nodes)]

    def member(self, node_id: int) -> Member | None:
        node = self._nodes.get(node_id)
        return None if node is None else node.snapshot()

    def state_of(self, node_id: int) -> MemberState | None:
        """The member's state without building a snapshot (cheap, for large simulations)."""
        node = self._nodes.get(node_id)
        return None if node is None else node.state

    @property
    def num_members(self) -> int:
        """Alive and suspect members, this one included (N in the protocol's log(N) scaling)."""
        return self._live

    @property
    def health_score(self) -> int:
        """Lifeguard local health: 0 is healthy; probe interval and timeout are stretched by score + 1."""
        return self._awareness.score

    @property
    def has_left(self) -> bool:
        return self._left

    @property
    def leave_propagated(self) -> bool:
        """After :meth:`leave`: the leave message has been sent its full count, or nobody is left to tell."""
        return self._left and (self._live == 0 or self._local_id not in self._queue)

    @property
    def pending_gossip(self) -> int:
        return len(self._queue)

    # Outputs

    def take_packets(self) -> list[tuple[str, bytes]]:
        """Datagrams to send, as (``host:port``, bytes)."""
        packets, self._packets = self._packets, []
        return packets

    def take_push_pulls(self) -> list[str]:
        """Members (``host:port``) to run a periodic push-pull with, over a stream."""
        targets, self._push_pulls = self._push_pulls, []
        return targets

    def take_events(self) -> list[MemberEvent]:
        events, self._events = self._events, []
        return events

    def next_deadline(self) -> float:
        """The earliest time :meth:`tick` has work to do."""
        deadline = (
            _INFINITY if self._left else min(self._next_probe_at, self._next_push_pull_at, self._next_reconnect_at)
        )
        probe = self._probe
        if probe is not None:
            deadline = min(deadline, probe.end if probe.indirect_sent else probe.ack_deadline)
        if self._queue:
            deadline = min(deadline, self._next_gossip_at)
        for suspicion in self._suspicions.values():
            deadline = min(deadline, suspicion.deadline, suspicion.reannounce_at)
        for relay in self._relays.values():
            deadline = min(deadline, relay.nack_at, relay.expires)
        return deadline

    # Inputs

    def tick(self, now: float) -> None:
        """Run every timer that is due at ``now``."""
        if self._suspicions:
            self._expire_suspicions(now)
        if self._relays:
            self._expire_relays(now)
        if self._probe is not None:
            self._advance_probe(now)
        if not self._left and now >= self._next_probe_at:
            self._start_probe(now)
        if now >= self._next_gossip_at:
            self._next_gossip_at = now + self._config.gossip_interval
            self._gossip(now)
        if not self._left and now >= self._next_push_pull_at:
            self._next_push_pull_at = now + self._config.push_pull_period(self._live)
            peers = self._random_nodes(1, lambda node_id, node: node_id != self._local_id and node.state == _ALIVE)
            if peers:
                self._push_pulls.append(peers[0].addr)
        if not self._left and now >= self._next_reconnect_at:
            self._next_reconnect_at = now + self._config.reconnect_interval
            dead = self._random_nodes(1, lambda node_id, node: node.state == _DEAD)
            if dead:
                self.counters.reconnects += 1
                self._push_pulls.append(dead[0].addr)

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
        if packet.sender not in self._nodes and not _introduces_sender(packet):
            counters.unknown_sender_dropped += 1
            return
        counters.messages_in += len(packet.messages)
        # Membership news first, so a reply (an ack) carries whatever it made us queue, such as a refutation.
        for message in packet.messages:
            if isinstance(message, Alive | Suspect | Dead):
                self._handle(now, src_addr, message)
        for message in packet.messages:
            if not isinstance(message, Alive | Suspect | Dead):
                self._handle(now, src_addr, message)
        if self._config.divergence_sync_delay > 0 and not self._left:
            self._check_divergence(now, packet, src_addr)

    def push_pull_request(self, *, join: bool) -> bytes:
        """Our full state, to send to a member (the first half of a push-pull)."""
        data = self._encode_state(join=join)
        self.counters.push_pulls_started += 1
        self.counters.stream_bytes_out += len(data)
        return data

    def handle_push_pull_request(self, now: float, data: bytes) -> bytes | None:
        """Serve a push-pull: merge the remote state and return ours, or None if the request is refused."""
        self.tick(now)
        state = self._accept_state(data)
        if state is None:
            return None
        # Reply with the state from before the merge, so the requester is not sent its own news back.
        reply = self._encode_state(join=False)
        self.counters.push_pulls_served += 1
        self.counters.stream_bytes_out += len(reply)
        self._merge(now, state)
        return reply

    def handle_push_pull_response(self, now: float, data: bytes) -> bool:
        """Merge the reply to our push-pull; False if it was refused."""
        self.tick(now)
        state = self._accept_state(data)
        if state is None:
            return False
        self._merge(now, state)
        return True

    def update_meta(self, now: float, meta: MemberMeta) -> None:
        """Publish new metadata for this member under a bumped incarnation."""
        if self._left:
            raise LifecycleError("this member has left; its metadata can no longer change")
        if meta.node_id != self._local_id:
            raise MetadataError("node_id", f"cannot change from {self._local_id} to {meta.node_id}")
        node = self._nodes[self._local_id]
        if meta == node.meta:
            return
        node.meta = meta
        node.incarnation = min(node.incarnation + 1, _MAX_INCARNATION)
        self._queue.put(self._local_id, encode_message(Alive(node.incarnation, meta, node.addr)))
        self._emit(EventKind.UPDATE, node, now)

    def leave(self, now: float) -> None:
        """Leave gracefully: tell the cluster, stop probing, keep gossiping until the news is out."""
        if self._left:
            return
        self._left = True
        self._probe = None
        node = self._nodes[self._local_id]
        self._on_dead(now, Dead(node.incarnation, self._local_id, self._local_id))
        # Spread it now rather than at the next gossip tick.
        self._gossip(now)

    def preload(self, now: float, members: Iterable[Member]) -> None:
        """Install live members known from elsewhere (a simulation's converged start) without gossiping.

        Members already known are left alone; the usual JOIN events are emitted.
        """
        for member in members:
            if member.node_id in self._nodes or not member.is_live:
                continue
            self._add(_Node(member.meta, member.gossip_addr, member.incarnation, _ALIVE, now), now)

    # Message handling

    def _handle(self, now: float, src_addr: str, message: Message) -> None:
        match message:
            case Ping(seq, target):
                if target != self._local_id:
                    self.counters.misdirected_dropped += 1
                else:
                    self._send(src_addr, [encode_message(Ack(seq))])
            case Ack(seq):
                self._on_ack(seq)
            case Nack(seq):
                if self._probe is not None and self._probe.seq == seq:
                    self._probe.nacks += 1
            case IndirectPing():
                self._on_indirect_ping(now, src_addr, message)
            case Alive():
                self._on_alive(now, message)
            case Suspect() | Dead():
                if not self._correct_stale(src_addr, message):
                    if isinstance(message, Suspect):
                        self._on_suspect(now, message)
                    else:
                        self._on_dead(now, message)

    def _check_divergence(self, now: float, packet: Packet, src_addr: str) -> None:
        """Push-pull with a sender that has kept knowing more live members than we do.

        Gossip reaches each member with high probability, not certainty; a member that missed a join keeps
        seeing higher counts from everyone. Counts differ briefly while any news spreads, hence the delay.
        """
        if packet.sender_members <= self._live or packet.sender == self._local_id:
            self._behind_since = None
            return
        if self._behind_since is None:
            self._behind_since = now
            return
        delay = self._config.divergence_sync_delay
        if now - self._behind_since >= delay and now >= self._next_divergence_sync:
            node = self._nodes.get(packet.sender)
            self._push_pulls.append(node.addr if node is not None else src_addr)
            self._behind_since = None
            self._next_divergence_sync = now + delay
            self.counters.divergence_syncs += 1

    def _correct_stale(self, src_addr: str, accusation: Suspect | Dead) -> bool:
        """Answer an accusation older than the alive news we hold by sending that news back; True if stale.

        A member that hears a suspicion after the refutation has finished spreading would otherwise keep
        its timer running until it kills a live member. Its own re-gossip of the old suspicion now reaches
        members that know better, and they correct it.
        """
        node = self._nodes.get(accusation.node)
        if node is None or node.state != _ALIVE or accusation.incarnation >= node.incarnation:
            return False
        self.counters.stale_corrections += 1
        self._send(src_addr, [encode_message(Alive(node.incarnation, node.meta, node.addr))])
        return True

    def _on_ack(self, seq: int) -> None:
        probe = self._probe
        if probe is not None and probe.seq == seq:
            self._probe = None
            self._awareness.apply_delta(-1)
            return
        relay = self._relays.pop(seq, None)
        if relay is not None:
            self._send(relay.origin_addr, [encode_message(Ack(relay.origin_seq))])

    def _on_indirect_ping(self, now: float, src_addr: str, request: IndirectPing) -> None:
        self.counters.indirect_relays += 1
        seq = self._next_seq()
        timeout = self._config.probe_timeout
        nack_at = now + _NACK_FRACTION * timeout if request.want_nack else _INFINITY
        self._relays[seq] = _Relay(src_addr, request.seq, nack_at, now + self._config.probe_interval)
        self._send(request.target_addr, [encode_message(Ping(seq, request.target))])

    def _on_alive(self, now: float, alive: Alive) -> None:
        node_id = alive.node
        is_local = node_id == self._local_id
        if is_local and self._left:
            return  # an old alive must not bring us back after leave()
        node = self._nodes.get(node_id)
        if node is None:
            self._queue.put(node_id, encode_message(alive))
            self._add(_Node(alive.meta, alive.gossip_addr, alive.incarnation, _ALIVE, now), now)
            return
        moved = alive.gossip_addr != node.addr
        if moved and node.state <= _SUSPECT:
            # A live member keeps its address; another process claiming its id is a misconfiguration.
            self.counters.conflicts += 1
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
        self._suspicions.pop(node_id, None)
        self._queue.put(node_id, encode_message(alive))
        old_state = node.state
        changed = moved or alive.meta != node.meta
        node.incarnation = alive.incarnation
        node.meta = alive.meta
        node.addr = alive.gossip_addr
        if old_state >= _DEAD:
            self._set_state(node, _ALIVE, now)
            self._emit(EventKind.JOIN, node, now)
            return
        if old_state == _SUSPECT:
            self._set_state(node, _ALIVE, now)
            self._emit(EventKind.ALIVE, node, now)
        if changed:
            self._emit(EventKind.UPDATE, node, now)

    def _on_suspect(self, now: float, suspect: Suspect) -> None:
        node = self._nodes.get(suspect.node)
        if node is None or suspect.incarnation < node.incarnation:
            return
        suspicion = self._suspicions.get(suspect.node)
        if suspicion is not None:
            # Re-gossip new confirmations so independent accusers keep shortening everyone's timer.
            if suspicion.confirm(suspect.accuser):
                self.counters.suspicion_confirmations += 1
                self._queue.put(suspect.node, encode_message(suspect))
            return
        if node.state != _ALIVE:
            return
        if suspect.node == self._local_id:
            self._refute(suspect.incarnation, accuser=suspect.accuser)
            return
        self._queue.put(suspect.node, encode_message(suspect))
        node.incarnation = suspect.incarnation
        self._set_state(node, _SUSPECT, now)
        self.counters.suspicions += 1
        self._emit(EventKind.SUSPECT, node, now)
        n = self._live
        # Expect confirmations only when enough other members exist to give them (minus us and the suspect).
        expected = max(0, self._config.suspicion_mult - 2)
        if n - 2 < expected:
            expected = 0
        shortest, longest = self._config.suspicion_timeouts(n)
        self._suspicions[suspect.node] = Suspicion(
            suspect.accuser, suspect.incarnation, expected, shortest, longest, now
        )

    def _on_dead(self, now: float, dead: Dead) -> None:
        node = self._nodes.get(dead.node)
        if node is None or dead.incarnation < node.incarnation:
            return
        self._suspicions.pop(dead.node, None)
        if node.state >= _DEAD:
            return
        if dead.node == self._local_id and not self._left:
            self._refute(dead.incarnation, accuser=dead.accuser)
            return
        self._queue.put(dead.node, encode_message(dead))
        node.incarnation = dead.incarnation
        if dead.accuser == dead.node:
            self._set_state(node, _LEFT, now)
            self.counters.leaves += 1
            self._emit(EventKind.LEAVE, node, now)
        else:
            self._set_state(node, _DEAD, now)
            self.counters.deaths += 1
            self._emit(EventKind.DEAD, node, now)

    def _refute(self, accused_incarnation: int, *, accuser: int | None = None) -> None:
        node = self._nodes[self._local_id]
        node.incarnation = min(max(node.incarnation, accused_incarnation) + 1, _MAX_INCARNATION)
        # Being accused is evidence that we are the slow one (Lifeguard).
        self._awareness.apply_delta(1)
        self.counters.refutations += 1
        self._queue.put(self._local_id, self._local_alive_frame(node))
        # The accuser's timer is the one that would kill us; do not leave reaching it to chance.
        accusing = self._nodes.get(accuser) if accuser is not None and accuser != self._local_id else None
        if accusing is not None and accusing.state <= _SUSPECT:
            self._send(accusing.addr, [self._local_alive_frame(node)])

    # Timers

    def _start_probe(self, now: float) -> None:
        interval = self._awareness.scale(self._config.probe_interval)
        self._next_probe_at = now + interval
        target = self._next_probe_target(now)
        if target is None:
            return
        node = self._nodes[target]
        seq = self._next_seq()
        ack_deadline = now + self._awareness.scale(self._config.probe_timeout)
        self._probe = _Probe(target, node.addr, seq, ack_deadline, now + interval)
        frames = [encode_message(Ping(seq, target))]
        if node.state == _SUSPECT:
            # Tell a suspect it is suspected, so it can refute even if gossip does not reach it.
            frames.append(encode_message(Suspect(node.incarnation, target, self._local_id)))
        self.counters.probes += 1
        self._send(node.addr, frames)

    def _next_probe_target(self, now: float) -> int | None:
        for _ in range(2 * len(self._ids) + 2):
            if self._probe_index >= len(self._ids):
                self._reset_probe_order(now)
            node_id = self._ids[self._probe_index]
            self._probe_index += 1
            if node_id != self._local_id and self._nodes[node_id].state <= _SUSPECT:
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
            for i, node in self._nodes.items()
            if i != self._local_id
            and (
                (node.state == _LEFT and node.changed_at < left_horizon)
                or (node.state == _DEAD and node.changed_at < dead_horizon)
            )
        ]:
            del self._nodes[node_id]
        self._ids = list(self._nodes)
        self._rng.shuffle(self._ids)
        self._probe_index = 0

    def _advance_probe(self, now: float) -> None:
        probe = self._probe
        if probe is None:
            return
        if not probe.indirect_sent and now >= probe.ack_deadline:
            probe.indirect_sent = True
            excluded = (self._local_id, probe.target)
            helpers = self._random_nodes(
                self._config.indirect_checks,
                lambda node_id, node: node.state == _ALIVE and node_id not in excluded,
            )
            frame = encode_message(IndirectPing(probe.seq, probe.target, probe.addr, True))
            for helper in helpers:
                self._send(helper.addr, [frame])
            probe.expected_nacks = len(helpers)
            self.counters.indirect_probes += len(helpers)
            # Retry directly as well, introducing ourselves: the ping may have been lost, or the target may
            # not know us yet and have ignored it (memberlist retries over TCP here instead).
            local = self._nodes[self._local_id]
            retry = [encode_message(Ping(probe.seq, probe.target)), self._local_alive_frame(local)]
            self.counters.probe_retries += 1
            self._send(probe.addr, retry)
        if now < probe.end:
            return
        self._probe = None
        self.counters.probe_failures += 1
        # Missing nacks mean our own network or CPU may be the problem; with no helpers, assume it might be.
        missed = probe.expected_nacks - probe.nacks if probe.expected_nacks else 1
        self._awareness.apply_delta(max(0, missed))
        node = self._nodes.get(probe.target)
        if node is not None and node.state <= _SUSPECT:
            self._on_suspect(now, Suspect(node.incarnation, probe.target, self._local_id))

    def _expire_suspicions(self, now: float) -> None:
        for node_id, suspicion in self._suspicions.items():
            if now >= suspicion.reannounce_at:
                # Repeat the accusation once: a holder that missed the refutation is corrected by members
                # that know better (_correct_stale), and the target hears it again if it has not yet.
                suspicion.reannounce_at = _INFINITY
                self.counters.suspicion_reannouncements += 1
                repeat = Suspect(suspicion.incarnation, node_id, suspicion.accuser)
                self._queue.put(node_id, encode_message(repeat))
        for node_id in [i for i, s in self._suspicions.items() if now >= s.deadline]:
            del self._suspicions[node_id]
            node = self._nodes.get(node_id)
            if node is not None and node.state == _SUSPECT:
                self.counters.deaths_declared += 1
                self._on_dead(now, Dead(node.incarnation, node_id, self._local_id))

    def _expire_relays(self, now: float) -> None:
        for seq, relay in list(self._relays.items()):
            if now >= relay.nack_at:
                relay.nack_at = _INFINITY
                self.counters.nacks_sent += 1
                self._send(relay.origin_addr, [encode_message(Nack(relay.origin_seq))])
            if now >= relay.expires:
                del self._relays[seq]

    def _gossip(self, now: float) -> None:
        if not self._queue:
            return
        dead_horizon = now - self._config.gossip_to_the_dead_time

        def wanted(node_id: int, node: _Node) -> bool:
            if node_id == self._local_id:
                return False
            # Gossip to the recently dead too, so a member wrongly declared dead hears it and refutes.
            return node.state <= _SUSPECT or (node.state == _DEAD and node.changed_at >= dead_horizon)

        for node in self._random_nodes(self._config.gossip_nodes, wanted):
            if not self._queue:
                break
            self._send(node.addr, [])

    # Helpers

    def _send(self, addr: str, frames: list[bytes]) -> None:
        """Send ``frames`` to ``addr`` with as much queued gossip as fits; nothing if both are empty."""
        budget = self._config.max_packet_bytes - HEADER_BYTES - sum(len(f) for f in frames)
        if self._limit_for != self._live:
            self._limit_for, self._limit = self._live, self._config.retransmit_limit(self._live)
        gossip = self._queue.take(budget, self._limit)
        if gossip:
            frames = frames + gossip
            self.counters.gossip_messages_out += len(gossip)
        elif not frames:
            return
        data = encode_packet(self._tag, self._local_id, self._live, frames)
        self._packets.append((addr, data))
        self.counters.packets_out += 1
        self.counters.bytes_out += len(data)

    def _random_nodes(self, k: int, accept: Callable[[int, _Node], bool]) -> list[_Node]:
        """Up to ``k`` distinct random members passing ``accept`` (memberlist's kRandomNodes)."""
        chosen: list[_Node] = []
        if k <= 0:
            return chosen
        ids, nodes, seen = self._ids, self._nodes, set()
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

    def _add(self, node: _Node, now: float) -> None:
        node_id = node.meta.node_id
        self._nodes[node_id] = node
        # Insert at a random place in the probe order, so new members are probed soon on average.
        self._ids.append(node_id)
        swap = self._rng.randrange(len(self._ids))
        self._ids[swap], self._ids[-1] = self._ids[-1], self._ids[swap]
        if node.state <= _SUSPECT:
            self._live += 1
        node.changed_at = now
        self._emit(EventKind.JOIN, node, now)

    def _set_state(self, node: _Node, state: MemberState, now: float) -> None:
        self._live += (state <= _SUSPECT) - (node.state <= _SUSPECT)
        node.state = state
        node.changed_at = now

    def _emit(self, kind: EventKind, node: _Node, now: float) -> None:
        self._events.append(MemberEvent(kind, node.snapshot(), now))

    @staticmethod
    def _local_alive_frame(local: _Node) -> bytes:
        return encode_message(Alive(local.incarnation, local.meta, local.addr))

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        return self._seq

    def _encode_state(self, *, join: bool) -> bytes:
        entries = tuple(StateEntry(n.incarnation, n.meta, n.addr, n.state) for n in self._nodes.values())
        data = encode_push_pull(PushPull(self._tag, self._local_id, join, entries))
        if len(data) > self._config.max_push_pull_bytes:
            raise MembershipCodecError(f"push-pull state of {len(data)} bytes exceeds max_push_pull_bytes")
        return data

    def _accept_state(self, data: bytes) -> PushPull | None:
        counters = self.counters
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
        if state.sender not in self._nodes and not any(
            entry.meta.node_id == state.sender and entry.state == _ALIVE for entry in state.entries
        ):
            counters.unknown_sender_dropped += 1
            return None
        return state

    def _merge(self, now: float, state: PushPull) -> None:
        for entry in state.entries:
            node_id = entry.meta.node_id
            if entry.state == _ALIVE:
                self._on_alive(now, Alive(entry.incarnation, entry.meta, entry.gossip_addr))
            elif entry.state == _LEFT:
                self._on_dead(now, Dead(entry.incarnation, node_id, node_id))
            else:
                # A member the peer thinks dead is only suspected here: we may still reach it.
                self._on_suspect(now, Suspect(entry.incarnation, node_id, state.sender))


def _introduces_sender(packet: Packet) -> bool:
    """An unknown sender is heard only if the packet carries its own alive message (it is joining)."""
    return any(isinstance(m, Alive) and m.node == packet.sender for m in packet.messages)
