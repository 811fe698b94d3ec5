"""SWIM member-list: a pure protocol core and a network runtime.

* :class:`MemberList` is what a node embeds: asyncio, UDP for probes and gossip, TCP for push-pull.
* :class:`SwimCore` is the protocol with no I/O and no clock, driven by whoever holds it (the runtime, or
  :class:`SimulatedNetwork` in tests and capacity projections).
* :class:`MembershipConfig` holds every setting, with :meth:`~MembershipConfig.lan` and
  :meth:`~MembershipConfig.local` profiles.
* :class:`Keyring` holds the AES keys that seal gossip (hashicorp/memberlist's keyring); without one, gossip
  travels in plain text.
"""

from membership._crypto import KEY_SIZES, SEAL_OVERHEAD, Keyring, generate_key
from membership._runtime import MemberList
from membership._state import SwimCore
from membership._transport import NetTransport, PacketHandler, StreamHandler, Transport
from membership._types import Counters, EventKind, Member, MemberEvent, MemberMeta, MemberState
from membership.config import MembershipConfig
from membership.errors import (
    JoinError,
    KeyringError,
    LifecycleError,
    MembershipCodecError,
    MembershipConfigError,
    MembershipError,
    MetadataError,
    TransportError,
    UndecryptableError,
)
from membership.simulation import NetworkStats, SimulatedNetwork

__all__ = [
    # runtime
    "MemberList",
    "MembershipConfig",
    "MemberMeta",
    "Member",
    "MemberState",
    "MemberEvent",
    "EventKind",
    "Counters",
    # gossip encryption
    "Keyring",
    "generate_key",
    "KEY_SIZES",
    "SEAL_OVERHEAD",
    # transport
    "Transport",
    "NetTransport",
    "PacketHandler",
    "StreamHandler",
    # protocol core and simulation
    "SwimCore",
    "SimulatedNetwork",
    "NetworkStats",
    # errors
    "MembershipError",
    "MembershipConfigError",
    "MetadataError",
    "MembershipCodecError",
    "UndecryptableError",
    "KeyringError",
    "LifecycleError",
    "TransportError",
    "JoinError",
]
