"""Failure detection: one probe per interval, direct and then through helpers, with Lifeguard's nacks.

Each probe interval one member is pinged; if no ack comes within the probe timeout, ``indirect_checks``
members are asked to ping it, and they nack if they hear nothing, which tells the prober its own network is
fine (local health awareness). A member that misses the whole interval is suspected. Beyond memberlist, the
direct ping is retried, carrying our alive message, when its ack is late (``probe_retries``).
"""

from __future__ import annotations

from membership._awareness import Awareness
from membership._outbox import Outbox
from membership._table import MemberTable
from membership._transitions import Transitions, local_alive_frame
from membership._types import Counters, MemberState
from membership._wire import Ack, IndirectPing, Nack, Ping, Suspect, encode_message
from membership.config import MembershipConfig

__all__ = ["Prober"]

_ALIVE, _SUSPECT = MemberState.ALIVE, MemberState.SUSPECT
_INFINITY = float("inf")
# A helper nacks before the asker's interval ends: the asker sends indirect pings at probe_timeout and gives
# up at probe_interval, which is at least twice as long in both profiles.
_NACK_FRACTION = 0.8


class _Probe:
    __slots__ = (
        "ack_deadline",
        "addr",
        "end",
        "expected_nacks",
        "helpers",
        "indirect_sent",
        "nacks",
        "seq",
        "target",
    )

    def __init__(self, target: int, addr: str, seq: int, ack_deadline: float, end: float) -> None:
        self.target = target
        self.addr = addr
        self.seq = seq
        self.ack_deadline = ack_deadline
        self.end = end
        self.indirect_sent = False
        self.expected_nacks = 0
        self.nacks = 0
        self.helpers: frozenset[str] = frozenset()  # addresses allowed to answer besides the target


class _Relay:
    """An indirect ping this node is carrying out for another member."""

    __slots__ = ("expires", "nack_at", "origin_addr", "origin_seq", "target_addr")

    def __init__(self, origin_addr: str, origin_seq: int, target_addr: str, nack_at: float, expires: float) -> None:
        self.origin_addr = origin_addr
        self.target_addr = target_addr
        self.origin_seq = origin_seq
        self.nack_at = nack_at  # infinity once sent, or if no nack was asked for
        self.expires = expires


class Prober:
    """Our probe of one member at a time, the indirect pings we relay for others, and the answers to pings."""

    __slots__ = (
        "_awareness",
        "_config",
        "_counters",
        "_outbox",
        "_probe",
        "_relays",
        "_seq",
        "_table",
        "_transitions",
        "next_probe_at",
    )

    def __init__(
        self,
        config: MembershipConfig,
        table: MemberTable,
        outbox: Outbox,
        transitions: Transitions,
        awareness: Awareness,
        counters: Counters,
        *,
        seq: int,
        first_probe_at: float,
    ) -> None:
        self._config = config
        self._table = table
        self._outbox = outbox
        self._transitions = transitions
        self._awareness = awareness
        self._counters = counters
        self._seq = seq
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self.next_probe_at = first_probe_at

    def deadline(self) -> float:
        """The earliest timer of the running probe and the relays (the next probe's start is not included)."""
        deadline = _INFINITY
        probe = self._probe
        if probe is not None:
            deadline = probe.end if probe.indirect_sent else probe.ack_deadline
        for relay in self._relays.values():
            deadline = min(deadline, relay.nack_at, relay.expires)
        return deadline

    def tick(self, now: float, *, may_start: bool) -> None:
        if self._relays:
            self._expire_relays(now)
        if self._probe is not None:
            self._advance_probe(now)
        if may_start and now >= self.next_probe_at:
            self._start_probe(now)

    def cancel(self) -> None:
        self._probe = None

    def on_ping(self, src_addr: str, ping: Ping) -> None:
        if ping.target != self._table.local_id:
            self._counters.misdirected_dropped += 1
        else:
            self._outbox.send(src_addr, [encode_message(Ack(ping.seq))])

    # An ack counts only from the address that was pinged or a helper asked to: a third party that guesses
    # the sequence number must not keep a dead member alive.
    def on_ack(self, src_addr: str, seq: int) -> None:
        probe = self._probe
        if probe is not None and probe.seq == seq:
            if src_addr == probe.addr or src_addr in probe.helpers:
                self._probe = None
                self._awareness.apply_delta(-1)
            return
        relay = self._relays.get(seq)
        if relay is not None and src_addr == relay.target_addr:
            del self._relays[seq]
            self._outbox.send(relay.origin_addr, [encode_message(Ack(relay.origin_seq))])

    def on_nack(self, src_addr: str, seq: int) -> None:
        probe = self._probe
        if probe is not None and probe.seq == seq and src_addr in probe.helpers:
            probe.nacks += 1

    def on_indirect_ping(self, now: float, src_addr: str, request: IndirectPing) -> None:
        self._counters.indirect_relays += 1
        seq = self._next_seq()
        timeout = self._config.probe_timeout
        nack_at = now + _NACK_FRACTION * timeout if request.want_nack else _INFINITY
        self._relays[seq] = _Relay(
            src_addr, request.seq, request.target_addr, nack_at, now + self._config.probe_interval
        )
        self._outbox.send(request.target_addr, [encode_message(Ping(seq, request.target))])

    def greet(self, addr: str, node_id: int) -> None:
        """Ping a member we heard of second-hand, introducing ourselves: its answer confirms it."""
        self._outbox.send(addr, [encode_message(Ping(self._next_seq(), node_id)), local_alive_frame(self._table.local)])

    def _start_probe(self, now: float) -> None:
        interval = self._awareness.scale(self._config.probe_interval)
        self.next_probe_at = now + interval
        target = self._table.next_probe_target(now)
        if target is None:
            return
        node = self._table.nodes[target]
        seq = self._next_seq()
        ack_deadline = now + self._awareness.scale(self._config.probe_timeout)
        self._probe = _Probe(target, node.addr, seq, ack_deadline, now + interval)
        frames = [encode_message(Ping(seq, target))]
        if node.state == _SUSPECT:
            # Tell a suspect it is suspected, so it can refute even if gossip does not reach it.
            frames.append(encode_message(Suspect(node.incarnation, target, self._table.local_id)))
        self._counters.probes += 1
        self._outbox.send(node.addr, frames)

    def _advance_probe(self, now: float) -> None:
        probe = self._probe
        if probe is None:
            return
        table = self._table
        if not probe.indirect_sent and now >= probe.ack_deadline:
            probe.indirect_sent = True
            excluded = (table.local_id, probe.target)
            helpers = table.random_nodes(
                self._config.indirect_checks,
                lambda node_id, node: node.state == _ALIVE and node_id not in excluded,
            )
            frame = encode_message(IndirectPing(probe.seq, probe.target, probe.addr, True))
            for helper in helpers:
                self._outbox.send(helper.addr, [frame])
            probe.expected_nacks = len(helpers)
            probe.helpers = frozenset(helper.addr for helper in helpers)
            self._counters.indirect_probes += len(helpers)
            # Retry directly as well, introducing ourselves: the ping may have been lost, or the target may
            # not know us yet and have ignored it (memberlist retries over TCP here instead).
            retry = [encode_message(Ping(probe.seq, probe.target)), local_alive_frame(table.local)]
            self._counters.probe_retries += 1
            self._outbox.send(probe.addr, retry)
        if now < probe.end:
            return
        self._probe = None
        self._counters.probe_failures += 1
        # Missing nacks mean our own network or CPU may be the problem; with no helpers, assume it might be.
        missed = probe.expected_nacks - probe.nacks if probe.expected_nacks else 1
        self._awareness.apply_delta(max(0, missed))
        node = table.nodes.get(probe.target)
        if node is not None and node.state <= _SUSPECT:
            self._transitions.on_suspect(now, Suspect(node.incarnation, probe.target, table.local_id))

    def _expire_relays(self, now: float) -> None:
        for seq, relay in list(self._relays.items()):
            if now >= relay.nack_at:
                relay.nack_at = _INFINITY
                self._counters.nacks_sent += 1
                self._outbox.send(relay.origin_addr, [encode_message(Nack(relay.origin_seq))])
            if now >= relay.expires:
                del self._relays[seq]

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        return self._seq
