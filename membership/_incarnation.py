"""Incarnation numbers compared as serial numbers (RFC 1982), so that none of them is a ceiling.

Incarnations travel as u32. Compared as plain integers, an accusation forged at 2**32 - 1 could never be
refuted: the member cannot go above it. Compared as serial numbers, every incarnation has a successor
(``2**32 - 1`` is followed by ``0``), and ``a`` is newer than ``b`` when it is less than half the space ahead.
Third parties may not move a member's incarnation further than ``max_incarnation_jump`` ahead of what we
hold (see :mod:`membership._transitions`), so honest numbers stay far inside that half.
"""

from __future__ import annotations

__all__ = ["INCARNATION_SPACE", "ahead", "is_newer", "is_at_least", "successor"]

INCARNATION_SPACE = 2**32
_HALF = INCARNATION_SPACE // 2


def ahead(a: int, b: int) -> int:
    """How far ``a`` is ahead of ``b``, in [0, 2**32)."""
    return (a - b) % INCARNATION_SPACE


def is_newer(a: int, b: int) -> bool:
    """True if ``a`` comes after ``b`` (and is less than half the space ahead)."""
    return 0 < ahead(a, b) < _HALF


def is_at_least(a: int, b: int) -> bool:
    return a == b or is_newer(a, b)


def successor(a: int) -> int:
    return (a + 1) % INCARNATION_SPACE
