"""Errors raised by :mod:`membership`.

Every error the package raises derives from :class:`MembershipError`; errors from the OS and asyncio are
mapped at the boundary (``raise ... from exc``) so callers never see a foreign exception::

    MembershipError
    ├── MembershipConfigError     a MembershipConfig field is wrong (names the field); also a ValueError
    ├── MetadataError             a MemberMeta field is wrong (names the field); also a ValueError
    ├── MembershipCodecError      bytes are not a valid packet or push-pull state; also a ValueError
    │   └── UndecryptableError    no key of the gossip keyring opens a sealed message (wrong key, altered, plain)
    ├── KeyringError              a gossip keyring (or its file) is wrong: bad base64, key size, unreadable
    ├── LifecycleError            the call does not fit the member's phase: not started, stopped, or left
    └── TransportError            a socket could not be bound, or a TCP push-pull exchange failed
        └── JoinError             no seed answered the join push-pull; ``failures`` says why, per seed

The protocol core never raises on received bytes: malformed packets are dropped and counted.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
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


class MembershipError(Exception):
    """Base of every error raised by the membership package."""


class MembershipConfigError(MembershipError, ValueError):
    """A configuration field has a wrong value; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class MetadataError(MembershipError, ValueError):
    """A member metadata field has a wrong value; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class MembershipCodecError(MembershipError, ValueError):
    """Bytes that are not a valid packet or push-pull state (truncated, unknown type, bad field)."""


class UndecryptableError(MembershipCodecError):
    """No key of the gossip keyring opens a sealed message: another key, altered bytes, or plain text."""


class KeyringError(MembershipError, ValueError):
    """A gossip keyring is wrong: a line that is not base64, a key not 16, 24 or 32 bytes, an unreadable file."""


class LifecycleError(MembershipError):
    """The member was used in the wrong phase: before start(), after stop(), or after leave()."""


class TransportError(MembershipError):
    """A socket could not be bound, or a TCP push-pull exchange with a peer failed."""


class JoinError(TransportError):
    """No seed answered the join push-pull. ``failures`` maps each seed address to the reason."""

    def __init__(self, failures: Mapping[str, str]) -> None:
        detail = "; ".join(f"{seed}: {reason}" for seed, reason in failures.items())
        super().__init__(f"could not join through any seed ({detail})")
        self.failures = dict(failures)
