"""Payloads of a partition group's CONTROL entries: decisions the leader replicates so every replica acts
on them at the same point of the log.

    u8 version (1), u8 kind, body
    DROP_BEFORE  u64 index   retention: drop the sealed segments whose entries are all below index
    ROLL         (empty)     its timestamp makes the active segment roll by age, even on an idle partition
    TRIM         u64 offset  DeleteRecords: the log start offset moves up to offset (records below it are gone)
"""

from __future__ import annotations

import struct
from enum import IntEnum

__all__ = ["ControlKind", "encode_drop_before", "encode_roll", "encode_trim", "decode_control"]

_VERSION = 1
_HEAD = struct.Struct("<BB")
_INDEX = struct.Struct("<Q")


class ControlKind(IntEnum):
    DROP_BEFORE = 1
    ROLL = 2
    TRIM = 3


def encode_drop_before(index: int) -> bytes:
    return _HEAD.pack(_VERSION, ControlKind.DROP_BEFORE) + _INDEX.pack(index)


def encode_roll() -> bytes:
    return _HEAD.pack(_VERSION, ControlKind.ROLL)


def encode_trim(offset: int) -> bytes:
    return _HEAD.pack(_VERSION, ControlKind.TRIM) + _INDEX.pack(offset)


def decode_control(payload: bytes | memoryview) -> tuple[ControlKind, int]:
    """(kind, argument); raises ValueError for a payload this version cannot read."""
    if len(payload) < _HEAD.size:
        raise ValueError("control entry too short")
    version, kind = _HEAD.unpack_from(payload)
    if version != _VERSION:
        raise ValueError(f"control entry version {version}")
    if kind == ControlKind.DROP_BEFORE:
        if len(payload) != _HEAD.size + _INDEX.size:
            raise ValueError("bad DROP_BEFORE entry")
        return ControlKind.DROP_BEFORE, _INDEX.unpack_from(payload, _HEAD.size)[0]
    if kind == ControlKind.TRIM:
        if len(payload) != _HEAD.size + _INDEX.size:
            raise ValueError("bad TRIM entry")
        return ControlKind.TRIM, _INDEX.unpack_from(payload, _HEAD.size)[0]
    if kind == ControlKind.ROLL:
        return ControlKind.ROLL, 0
    raise ValueError(f"unknown control kind {kind}")
