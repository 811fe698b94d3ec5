"""Member-list configuration: one frozen dataclass, every field with its unit and default.

The defaults are the LAN profile (hashicorp/memberlist's ``DefaultLANConfig``); :meth:`MembershipConfig.local`
tunes them for clusters on one host, where packets are rarely lost and failures should be seen within a
couple of seconds. All times are seconds on the clock that drives the member-list (``loop.time()`` in the
runtime, the virtual clock in simulations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from membership.errors import MembershipConfigError
from storage.config_fields import setting

__all__ = ["MembershipConfig"]

MiB = 1024 * 1024
# Largest UDP payload over IPv4.
_MAX_DATAGRAM = 65507


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """How a member probes, suspects, gossips and synchronises. Defaults are the LAN profile."""

    cluster_name: str = setting(
        "multiraft",
        "text",
        "Packets and push-pull states tagged with another cluster's name are dropped, so two clusters can "
        "share hosts and ports safely. Default 'multiraft'.",
    )
    probe_interval: float = setting(
        1.0,
        "seconds",
        "One member is probed per interval, round-robin over a shuffled list. Stretched by local health "
        "awareness when this node is slow. Default 1.0.",
    )
    probe_timeout: float = setting(
        0.5,
        "seconds",
        "Wait this long for a direct ack before asking indirect_checks members to probe. Must be below "
        "probe_interval; also how long a helper waits before it sends a nack. Default 0.5.",
    )
    indirect_checks: int = setting(
        3, "members", "Members asked to probe a target that missed its direct ack. Default 3."
    )
    suspicion_mult: int = setting(
        4,
        "probe intervals",
        "Minimum suspicion timeout = suspicion_mult * max(1, log10(N)) * probe_interval, reached once "
        "suspicion_mult - 2 members independently confirm the suspicion (Lifeguard). Default 4.",
    )
    suspicion_max_timeout_mult: int = setting(
        6,
        "multiple of the minimum",
        "A suspicion nobody confirms times out after this multiple of the minimum timeout. Default 6.",
    )
    awareness_max_multiplier: int = setting(
        8,
        "multiple",
        "Local health awareness (Lifeguard): a node that misses acks and nacks stretches its own probe "
        "interval and timeout by up to this factor. 1 turns it off. Default 8.",
    )
    retransmit_mult: int = setting(
        4,
        "transmissions",
        "Each gossip message is sent retransmit_mult * ceil(log10(N + 1)) times. Default 4.",
    )
    gossip_interval: float = setting(
        0.2,
        "seconds",
        "While gossip is queued, send it to gossip_nodes random members this often, besides piggybacking "
        "it on probes and acks. Default 0.2.",
    )
    gossip_nodes: int = setting(
        3, "members", "Members gossiped to per gossip_interval; 0 leaves only piggybacking. Default 3."
    )
    gossip_to_the_dead_time: float = setting(
        30.0,
        "seconds",
        "Dead members still get gossip this long (so a wrongly killed node learns and refutes); left "
        "members are forgotten after it. Default 30.",
    )
    reconnect_interval: float = setting(
        30.0,
        "seconds",
        "This often, push-pull with one random dead member (as Serf's reconnect), so the two sides of a "
        "healed partition find each other again. 0 turns it off. Default 30.",
    )
    reconnect_timeout: float = setting(
        86400.0,
        "seconds",
        "Dead members are remembered, and retried, this long before they are forgotten (with reconnect off: "
        "gossip_to_the_dead_time). Default 86400 (24 h).",
    )
    push_pull_interval: float = setting(
        30.0,
        "seconds",
        "Full-state TCP sync with one random member this often; scaled up beyond 32 members. 0 turns the "
        "periodic sync off (joins still use it). Default 30.",
    )
    divergence_sync_delay: float = setting(
        3.0,
        "seconds",
        "Every packet says how many live members its sender knows. A node that keeps hearing larger counts "
        "than its own for this long missed some gossip, and push-pulls with that sender (at most once per "
        "delay) instead of waiting for the periodic sync. 0 turns it off. Default 3.",
    )
    max_incarnation_jump: int = setting(
        1024,
        "incarnations",
        "News about a member relayed by a third party may move its incarnation at most this far ahead of "
        "the one held here; larger jumps are dropped as implausible (a member's own news is not bounded). "
        "Default 1024.",
    )
    max_packet_bytes: int = setting(
        1400,
        "bytes",
        "Largest UDP datagram sent or accepted; piggybacked gossip fills packets up to it (a keyring adds 29 "
        "bytes: version, nonce, tag). Must fit the path MTU. At least 1200, so the largest alive message "
        "(about 1140 bytes) always fits. Default 1400.",
    )
    max_push_pull_bytes: int = setting(
        16 * MiB,
        "bytes",
        "Largest push-pull state sent or accepted over TCP (about 80 bytes per member). Default 16 MiB.",
    )
    tcp_timeout: float = setting(
        10.0, "seconds", "Deadline for one TCP push-pull exchange, connect included. Default 10."
    )
    gossip_verify_incoming: bool = setting(
        True,
        "bool",
        "With a keyring: drop every datagram and push-pull message that is not sealed with one of its keys. "
        "False also accepts plain text, for a rolling migration to encryption (as memberlist). Default True.",
    )
    gossip_verify_outgoing: bool = setting(
        True,
        "bool",
        "With a keyring: seal everything sent with the primary key. False sends plain text, for the first "
        "step of a rolling migration to encryption. Default True.",
    )
    leave_timeout: float = setting(
        5.0,
        "seconds",
        "leave() waits at most this long for the leave message to be gossiped out. Default 5.",
    )

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def lan(cls, **overrides: Any) -> MembershipConfig:
        """The defaults: a LAN, probe every second, failures confirmed within several seconds."""
        return cls(**overrides)

    @classmethod
    def local(cls, **overrides: Any) -> MembershipConfig:
        """One host (127.0.0.1): probe every 200 ms; a crash is seen in about 1-2 s for small clusters."""
        settings: dict[str, Any] = {
            "probe_interval": 0.2,
            "probe_timeout": 0.1,
            "suspicion_mult": 3,
            "suspicion_max_timeout_mult": 4,
            "retransmit_mult": 3,
            "gossip_interval": 0.05,
            "gossip_to_the_dead_time": 10.0,
            "reconnect_interval": 2.0,
            "reconnect_timeout": 3600.0,
            "push_pull_interval": 10.0,
            "divergence_sync_delay": 1.0,
            "tcp_timeout": 1.0,
            "leave_timeout": 1.0,
        }
        settings.update(overrides)
        return cls(**settings)

    def with_changes(self, **changes: Any) -> MembershipConfig:
        """A copy with some fields changed (validated)."""
        return replace(self, **changes)

    def validate(self) -> MembershipConfig:
        """Return self, or raise :class:`MembershipConfigError` naming the first wrong field."""
        if not isinstance(self.cluster_name, str) or not 0 < len(self.cluster_name.encode()) <= 255:
            raise MembershipConfigError("cluster_name", f"must be 1-255 bytes of text, got {self.cluster_name!r}")
        for name in ("probe_interval", "probe_timeout", "gossip_interval", "tcp_timeout", "leave_timeout"):
            _positive_seconds(name, getattr(self, name))
        for name in (
            "gossip_to_the_dead_time",
            "reconnect_interval",
            "push_pull_interval",
            "divergence_sync_delay",
        ):
            value = getattr(self, name)
            if not 0 <= _number(name, value) <= 86400:
                raise MembershipConfigError(name, f"must be in [0, 86400] seconds, got {value!r}")
        if not 0 <= _number("reconnect_timeout", self.reconnect_timeout) <= 30 * 86400:
            raise MembershipConfigError(
                "reconnect_timeout", f"must be in [0, 2592000] seconds, got {self.reconnect_timeout!r}"
            )
        if self.probe_timeout >= self.probe_interval:
            raise MembershipConfigError(
                "probe_timeout",
                f"must be below probe_interval ({self.probe_interval}), got {self.probe_timeout}",
            )
        for name in ("gossip_verify_incoming", "gossip_verify_outgoing"):
            if not isinstance(getattr(self, name), bool):
                raise MembershipConfigError(name, f"must be a bool, got {getattr(self, name)!r}")
        _int_in("indirect_checks", self.indirect_checks, 0, 64)
        _int_in("suspicion_mult", self.suspicion_mult, 1, 1000)
        _int_in("suspicion_max_timeout_mult", self.suspicion_max_timeout_mult, 1, 1000)
        _int_in("awareness_max_multiplier", self.awareness_max_multiplier, 1, 1000)
        _int_in("retransmit_mult", self.retransmit_mult, 1, 1000)
        _int_in("gossip_nodes", self.gossip_nodes, 0, 64)
        _int_in("max_incarnation_jump", self.max_incarnation_jump, 1, 2**30)
        _int_in("max_packet_bytes", self.max_packet_bytes, 1200, _MAX_DATAGRAM)
        _int_in("max_push_pull_bytes", self.max_push_pull_bytes, 64 * 1024, 1024 * MiB)
        return self

    # Derived quantities. ``n`` is the number of live members, this node included.

    def retransmit_limit(self, n: int) -> int:
        """How many times one gossip message is sent: ``retransmit_mult * ceil(log10(n + 1))``."""
        return self.retransmit_mult * math.ceil(math.log10(max(1, n) + 1))

    def suspicion_timeouts(self, n: int) -> tuple[float, float]:
        """(fully confirmed, unconfirmed) suspicion timeouts for a cluster of ``n`` members."""
        shortest = self.suspicion_mult * max(1.0, math.log10(max(1, n))) * self.probe_interval
        return shortest, shortest * self.suspicion_max_timeout_mult

    def push_pull_period(self, n: int) -> float:
        """Periodic push-pull interval, stretched beyond 32 members so TCP load per node stays flat."""
        if n <= 32:
            return self.push_pull_interval
        return self.push_pull_interval * (math.ceil(math.log2(n) - math.log2(32)) + 1)

    def failure_detection_bound(self, n: int) -> float:
        """Longest time from a crash until every live member has declared the crashed one dead.

        Holds in a healthy cluster (no packet loss, so health awareness never stretches the interval):
        every member probes every other one within two rounds of its shuffled list (2 * (n - 1) intervals),
        its probe fails by the end of that interval, and its suspicion times out at the latest after the
        unconfirmed timeout. Gossip from faster members only makes it sooner.
        """
        return (2 * (n - 1) + 1) * self.probe_interval + self.suspicion_timeouts(n)[1]

    def describe(self) -> list[tuple[str, str, Any, str]]:
        """(name, unit, value, doc) for each field, for reference docs and ``--help`` output."""
        return [(f.name, f.metadata["unit"], getattr(self, f.name), f.metadata["doc"]) for f in fields(self)]


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MembershipConfigError(name, f"must be a finite number, got {value!r}")
    return float(value)


def _positive_seconds(name: str, value: object) -> None:
    if not 0 < _number(name, value) <= 3600:
        raise MembershipConfigError(name, f"must be in (0, 3600] seconds, got {value!r}")


def _int_in(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MembershipConfigError(name, f"must be an int, got {value!r}")
    if not low <= value <= high:
        raise MembershipConfigError(name, f"must be in [{low}, {high}], got {value}")
