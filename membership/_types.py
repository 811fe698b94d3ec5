"""The values the member-list hands out: metadata, member snapshots, events and counters."""

from __future__ import annotations

import enum
import functools
import math
import re
from dataclasses import dataclass, fields

from membership.errors import MetadataError

__all__ = [
    "MemberMeta",
    "MemberState",
    "Member",
    "EventKind",
    "MemberEvent",
    "Counters",
    "split_host_port",
    "MAX_NODE_ID",
    "MAX_TEXT_BYTES",
    "MAX_HOST_BYTES",
]

MAX_NODE_ID = 2**64 - 1
# Every text field travels with a one-byte length.
MAX_TEXT_BYTES = 255
# Short enough that the largest alive message, host included, still fits the smallest packet allowed.
MAX_HOST_BYTES = 64


_WHITESPACE = re.compile(r"\s")


# Cached: every alive message received carries three addresses, and the same ones recur constantly.
@functools.lru_cache(maxsize=8192)
def split_host_port(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` (``"[v6]:port"`` for IPv6) into its parts, or raise ``ValueError``."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {address!r}")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise ValueError(f"bad IPv6 host in {address!r}")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 host must be in brackets: {address!r}")
    if _WHITESPACE.search(host):
        raise ValueError(f"host contains whitespace: {address!r}")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"port is not a number in {address!r}")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"port must be in [1, 65535] in {address!r}")
    return host, port


def check_address(field_name: str, address: object) -> None:
    """Raise :class:`MetadataError` naming ``field_name`` unless ``address`` is a short ``host:port``."""
    if not isinstance(address, str):
        raise MetadataError(field_name, f"must be a 'host:port' string, got {address!r}")
    if len(address.encode()) > MAX_TEXT_BYTES:
        raise MetadataError(field_name, f"must be at most {MAX_TEXT_BYTES} bytes of UTF-8")
    try:
        split_host_port(address)
    except ValueError as exc:
        raise MetadataError(field_name, str(exc)) from exc


@dataclass(frozen=True, slots=True)
class MemberMeta:
    """What a member tells the cluster about itself; gossiped with every alive message.

    Change it with :meth:`MemberList.update_meta`, which re-gossips it under a bumped incarnation.
    """

    node_id: int
    """Cluster-unique id of the node, in [1, 2**64 - 1]. The member-list's key."""
    client_addr: str
    """``host:port`` where clients reach the node's gRPC API."""
    peer_addr: str
    """``host:port`` where other nodes reach its Raft transport."""
    rack: str = ""
    """Failure domain for replica placement; may be empty."""
    capacity: float = 1.0
    """Relative weight for placement (> 0): a node with 2.0 should get about twice the replicas of 1.0."""
    host: str = ""
    """The machine the member runs on, shared by the nodes of one machine; empty when unknown. At most 64
    bytes of UTF-8."""

    def __post_init__(self) -> None:
        if isinstance(self.node_id, bool) or not isinstance(self.node_id, int):
            raise MetadataError("node_id", f"must be an int, got {self.node_id!r}")
        if not 0 < self.node_id <= MAX_NODE_ID:
            raise MetadataError("node_id", f"must be in [1, 2**64 - 1], got {self.node_id}")
        check_address("client_addr", self.client_addr)
        check_address("peer_addr", self.peer_addr)
        for name, limit in (("rack", MAX_TEXT_BYTES), ("host", MAX_HOST_BYTES)):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise MetadataError(name, f"must be a string, got {value!r}")
            if len(value.encode()) > limit:
                raise MetadataError(name, f"must be at most {limit} bytes of UTF-8")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int | float):
            raise MetadataError("capacity", f"must be a number, got {self.capacity!r}")
        if not (math.isfinite(self.capacity) and self.capacity > 0):
            raise MetadataError("capacity", f"must be a finite number > 0, got {self.capacity!r}")


class MemberState(enum.IntEnum):
    """Where a member stands, as this node believes. The values are part of the wire format."""

    ALIVE = 0
    SUSPECT = 1
    DEAD = 2
    LEFT = 3


@dataclass(frozen=True, slots=True)
class Member:
    """A snapshot of one member as this node sees it."""

    meta: MemberMeta
    gossip_addr: str
    """``host:port`` of the member's UDP (and TCP push-pull) endpoint."""
    incarnation: int
    """The member's own version counter; only the member raises it (to refute or to publish new metadata)."""
    state: MemberState
    state_changed_at: float
    """When this node last saw the state change, on the clock that drives it (seconds)."""
    confirmed: bool = True
    """Heard first-hand at ``gossip_addr`` (a packet from it there, or its answer to our push-pull). A member
    known only from other members' gossip is not yet: its addresses are hearsay until it answers (an
    UPDATE event says when it does)."""

    @property
    def node_id(self) -> int:
        return self.meta.node_id

    @property
    def is_live(self) -> bool:
        """True for alive and suspect members: the ones :meth:`members` lists."""
        return self.state <= MemberState.SUSPECT


class EventKind(enum.Enum):
    """What changed about a member."""

    JOIN = "join"
    """It appeared: new, or back after being dead or having left."""
    UPDATE = "update"
    """Its metadata or gossip address changed while it stayed live, or it was confirmed first-hand."""
    SUSPECT = "suspect"
    """A probe failed and it is suspected; it stays in :meth:`members` until declared dead."""
    ALIVE = "alive"
    """It refuted a suspicion and is alive again."""
    DEAD = "dead"
    """It was declared failed and left :meth:`members`."""
    LEAVE = "leave"
    """It left gracefully and left :meth:`members`."""


@dataclass(frozen=True, slots=True)
class MemberEvent:
    """One change, with the member as it is after the change."""

    kind: EventKind
    member: Member
    at: float
    """When this node applied the change (seconds, on the clock that drives it)."""


@dataclass(slots=True)
class Counters:
    """Monotonic counters for metrics. The core and the runtime both add to the same instance."""

    packets_in: int = 0
    packets_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    messages_in: int = 0
    gossip_messages_out: int = 0
    """Alive/suspect/dead messages piggybacked or gossiped."""
    malformed_dropped: int = 0
    """Packets or push-pull states that failed to decode (including oversize datagrams)."""
    undecryptable_dropped: int = 0
    """Datagrams and push-pull messages no key of the gossip keyring opened: another key, altered, or plain
    text. They never reach the protocol core."""
    foreign_cluster_dropped: int = 0
    """Packets with another cluster's tag."""
    unknown_sender_dropped: int = 0
    """Packets from a node that is not a member and did not introduce itself."""
    spoofed_dropped: int = 0
    """Packets whose sender id is a member known at another address (and that do not announce a move)."""
    implausible_dropped: int = 0
    """Third-party news that moved a member's incarnation further ahead than max_incarnation_jump."""
    address_checks: int = 0
    """Push-pulls started to hear a member's own news after a third party reported an address change or an
    incarnation more than max_incarnation_jump ahead."""
    misdirected_dropped: int = 0
    """Pings meant for another node id (for example after an address was reused)."""
    probes: int = 0
    probe_failures: int = 0
    probe_retries: int = 0
    """Direct pings re-sent (with our alive message) when the first ack was late."""
    indirect_probes: int = 0
    """Indirect ping requests this node sent to helpers."""
    indirect_relays: int = 0
    """Indirect pings this node relayed for others."""
    nacks_sent: int = 0
    suspicions: int = 0
    """Times this node moved a member to suspect (its own probe or gossip)."""
    suspicion_confirmations: int = 0
    suspicion_reannouncements: int = 0
    deaths: int = 0
    """Times this node moved a member to dead."""
    deaths_declared: int = 0
    """Deaths decided by this node's own suspicion timer."""
    leaves: int = 0
    refutations: int = 0
    stale_corrections: int = 0
    """Stale suspect/dead news answered with the newer alive news we held."""
    conflicts: int = 0
    """Alive messages for a live node id with a different gossip address."""
    push_pulls_started: int = 0
    push_pulls_served: int = 0
    push_pull_failures: int = 0
    reconnects: int = 0
    """Push-pulls tried with a dead member, in case it was only cut off."""
    divergence_syncs: int = 0
    """Push-pulls started because peers kept knowing more live members than this node."""
    stream_bytes_in: int = 0
    stream_bytes_out: int = 0
    send_errors: int = 0
    events_dropped: int = 0
    """Events not delivered because a subscriber's queue was full."""
    callback_errors: int = 0

    def snapshot(self) -> dict[str, int]:
        """Every counter by name, for a metrics exporter."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
