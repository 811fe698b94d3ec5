"""Compact binary encoding of messages, configuration changes and states (little-endian, versioned).

Message layout::

    header   <BBBxQQQQQQQII  version=1, type, flags, pad, to, sender, term, log_term, index, commit,
                             reject_hint, entry count, context length
    context  (context length bytes)
    entries  one <QQBqI per entry: index, term, kind, timestamp_ms, payload length
    payloads the payloads, back to back
    snapshot (if flags & 8) <QQIQ index, term, conf-state length, data length; conf state; data

:func:`encode_message_buffers` returns the header block followed by the payload objects themselves, so a
transport can ``writelines``/``sendmsg`` them without copying a payload; :func:`encode_message` joins them.
:func:`decode_message` returns entries whose payloads are zero-copy ``memoryview`` slices of the input (they keep
the input buffer alive). Malformed, truncated or trailing bytes raise :class:`DecodeError` and nothing else.

Every field goes through the shared bounds-checked primitives of :mod:`storage.binary`; their errors are mapped
to :class:`DecodeError`/:class:`EncodeError` here, at the codec's boundary.
"""

from __future__ import annotations

import struct

from storage.binary import BinaryDecodeError, BinaryEncodeError, Reader, Writer

from .confchange import ConfChange, ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfState
from .errors import DecodeError, EncodeError
from .messages import Entry, EntryKind, HardState, Message, MessageType, Snapshot, SnapshotMeta

__all__ = [
    "WIRE_VERSION",
    "encode_message",
    "encode_message_buffers",
    "decode_message",
    "encode_conf_change",
    "decode_conf_change",
    "encode_conf_state",
    "decode_conf_state",
    "encode_hard_state",
    "decode_hard_state",
    "encode_snapshot_meta",
    "decode_snapshot_meta",
]

WIRE_VERSION = 1

_HEADER = struct.Struct("<BBBxQQQQQQQII")
_ENTRY = struct.Struct("<QQBqI")
_SNAPSHOT = struct.Struct("<QQIQ")
_HARD_STATE = struct.Struct("<QQQ")
_CONF_STATE = struct.Struct("<BIIII")
_CONF_CHANGE = struct.Struct("<BBII")
_CONF_CHANGE_SINGLE = struct.Struct("<BQ")
_SNAPSHOT_META = struct.Struct("<QQI")

_REJECT = 1
_QUIESCE = 2
_LEADER_TRANSFER = 4
_HAS_SNAPSHOT = 8
_LOG_LOST = 16
_KNOWN_FLAGS = _REJECT | _QUIESCE | _LEADER_TRANSFER | _HAS_SNAPSHOT | _LOG_LOST

_MESSAGE_TYPES = tuple(MessageType)
_ENTRY_KINDS = tuple(EntryKind)
_CONF_CHANGE_TYPES = tuple(ConfChangeType)
_TRANSITIONS = tuple(ConfChangeTransition)

_ENCODE_ERRORS = (BinaryEncodeError, OverflowError, TypeError, AttributeError)
# An enum index out of range (IndexError) is a malformed value; the primitives raise BinaryDecodeError only.
_DECODE_ERRORS = (BinaryDecodeError, ValueError, IndexError, OverflowError, TypeError)

Buffer = bytes | bytearray | memoryview


def _reader(data: Buffer, what: str) -> Reader:
    try:
        return Reader(data, what)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"cannot read the input as bytes: {exc}") from exc


# --- messages ------------------------------------------------------------------------------------------------


def encode_message_buffers(message: Message) -> list[bytes | memoryview]:
    """The encoding of ``message`` as a header block followed by the payload objects (never copied)."""
    try:
        if message.to <= 0 or message.sender <= 0:
            raise EncodeError(f"node ids must be > 0 (to={message.to}, sender={message.sender})")
        entries = message.entries
        context = message.context
        snapshot = message.snapshot
        flags = (
            (_REJECT if message.reject else 0)
            | (_QUIESCE if message.quiesce else 0)
            | (_LEADER_TRANSFER if message.leader_transfer else 0)
            | (_HAS_SNAPSHOT if snapshot is not None else 0)
            | (_LOG_LOST if message.log_lost else 0)
        )
        block = Writer()
        block.struct(
            _HEADER,
            WIRE_VERSION,
            message.type,
            flags,
            message.to,
            message.sender,
            message.term,
            message.log_term,
            message.index,
            message.commit,
            message.reject_hint,
            len(entries),
            len(context),
        )
        block.put(context)
        buffers: list[bytes | memoryview] = [b""]
        pack_entry = block.struct
        for entry in entries:
            payload = entry.payload
            pack_entry(_ENTRY, entry.index, entry.term, entry.kind, entry.timestamp_ms, len(payload))
            if payload:
                buffers.append(payload)
        buffers[0] = block.bytes()
        if snapshot is not None:
            meta = snapshot.meta
            conf = encode_conf_state(meta.conf_state)
            tail = Writer()
            tail.struct(_SNAPSHOT, meta.index, meta.term, len(conf), len(snapshot.data))
            tail.put(conf)
            buffers.append(tail.bytes())
            if snapshot.data:
                buffers.append(snapshot.data)
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {message.type!r}: {exc}") from exc
    return buffers


def encode_message(message: Message) -> bytes:
    """The encoding of ``message`` as one ``bytes`` object (copies the payloads once)."""
    return b"".join(encode_message_buffers(message))


def decode_message(data: Buffer) -> Message:
    """Decode one message; payloads are zero-copy slices of ``data``. Raises :class:`DecodeError`."""
    r = _reader(data, "message")
    try:
        if r.left < _HEADER.size:
            raise DecodeError(f"truncated message: {r.left} bytes, the header alone is {_HEADER.size}")
        (version, mtype, flags, to, sender, term, log_term, index, commit, reject_hint, n, context_len) = r.struct(
            _HEADER, "header"
        )
        if version != WIRE_VERSION:
            raise DecodeError(f"unknown wire version {version}")
        if flags & ~_KNOWN_FLAGS:
            raise DecodeError(f"unknown flags {flags:#x}")
        if mtype >= len(_MESSAGE_TYPES):
            raise DecodeError(f"unknown message type {mtype}")
        if to == 0 or sender == 0:
            raise DecodeError("node ids must be > 0")
        if context_len + n * _ENTRY.size > r.left:  # before the context is copied
            raise DecodeError("truncated message: context or entry table runs past the end")
        context = bytes(r.take(context_len, "context"))
        entries: list[Entry] = []
        if n:
            kinds = _ENTRY_KINDS
            take = r.take
            append = entries.append
            for e_index, e_term, e_kind, e_time, e_len in r.structs(_ENTRY, n, "entry table"):
                append(Entry(e_index, e_term, kinds[e_kind], e_time, take(e_len, "payload")))
        snapshot = None
        if flags & _HAS_SNAPSHOT:
            s_index, s_term, conf_len, data_len = r.struct(_SNAPSHOT, "snapshot header")
            conf_state = decode_conf_state(r.take(conf_len, "snapshot configuration"))
            snapshot = Snapshot(SnapshotMeta(s_index, s_term, conf_state), bytes(r.take(data_len, "snapshot data")))
        if r.left:
            raise DecodeError(f"{r.left} trailing bytes after the message")
        return Message(
            type=_MESSAGE_TYPES[mtype],
            to=to,
            sender=sender,
            term=term,
            log_term=log_term,
            index=index,
            commit=commit,
            entries=entries,
            reject=bool(flags & _REJECT),
            reject_hint=reject_hint,
            snapshot=snapshot,
            context=context,
            quiesce=bool(flags & _QUIESCE),
            leader_transfer=bool(flags & _LEADER_TRANSFER),
            log_lost=bool(flags & _LOG_LOST),
        )
    except DecodeError:
        raise
    except _DECODE_ERRORS as exc:
        raise DecodeError(f"malformed message: {exc}") from exc


# --- configuration -------------------------------------------------------------------------------------------


def encode_conf_state(conf_state: ConfState) -> bytes:
    """Encode a configuration (for snapshot metadata and storage adapters)."""
    try:
        cs = conf_state
        groups = (cs.voters, cs.learners, cs.voters_outgoing, cs.learners_next)
        w = Writer()
        w.struct(_CONF_STATE, 1 if cs.auto_leave else 0, *(len(ids) for ids in groups))
        for ids in groups:
            w.array("Q", ids)
        return w.bytes()
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {conf_state!r}: {exc}") from exc


def decode_conf_state(data: Buffer) -> ConfState:
    r = _reader(data, "configuration")
    try:
        if r.left < _CONF_STATE.size:
            raise DecodeError("truncated configuration")
        auto_leave, *counts = r.struct(_CONF_STATE, "header")
        if auto_leave > 1:
            raise DecodeError(f"bad auto_leave flag {auto_leave}")
        if 8 * sum(counts) != r.left:
            raise DecodeError("configuration length does not match its id counts")
        groups: list[tuple[int, ...]] = []
        for count in counts:
            ids = r.array("Q", count, "node ids")
            if any(node_id == 0 for node_id in ids):
                raise DecodeError("node ids must be > 0")
            groups.append(ids)
        return ConfState.of(groups[0], groups[1], groups[2], groups[3], bool(auto_leave))
    except DecodeError:
        raise
    except _DECODE_ERRORS as exc:
        raise DecodeError(f"malformed configuration: {exc}") from exc


def encode_conf_change(change: ConfChange) -> bytes:
    """Encode a configuration change (the payload of a CONFIG entry)."""
    try:
        w = Writer()
        w.struct(_CONF_CHANGE, WIRE_VERSION, change.transition, len(change.changes), len(change.context))
        for single in change.changes:
            w.struct(_CONF_CHANGE_SINGLE, single.type, single.node_id)
        w.put(change.context)
        return w.bytes()
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {change!r}: {exc}") from exc


def decode_conf_change(data: Buffer) -> ConfChange:
    r = _reader(data, "configuration change")
    try:
        if r.left < _CONF_CHANGE.size:
            raise DecodeError("truncated configuration change")
        version, transition, n, context_len = r.struct(_CONF_CHANGE, "header")
        if version != WIRE_VERSION:
            raise DecodeError(f"unknown configuration change version {version}")
        if n * _CONF_CHANGE_SINGLE.size + context_len != r.left:
            raise DecodeError("configuration change length does not match its counts")
        changes = []
        for change_type, node_id in r.structs(_CONF_CHANGE_SINGLE, n, "changes"):
            if node_id == 0:
                raise DecodeError("node ids must be > 0")
            changes.append(ConfChangeSingle(_CONF_CHANGE_TYPES[change_type], node_id))
        return ConfChange(tuple(changes), _TRANSITIONS[transition], bytes(r.take(context_len, "context")))
    except DecodeError:
        raise
    except _DECODE_ERRORS as exc:
        raise DecodeError(f"malformed configuration change: {exc}") from exc


# --- states --------------------------------------------------------------------------------------------------


def encode_hard_state(hard_state: HardState) -> bytes:
    try:
        w = Writer()
        w.struct(_HARD_STATE, hard_state.term, hard_state.vote, hard_state.commit)
        return w.bytes()
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {hard_state!r}: {exc}") from exc


def decode_hard_state(data: Buffer) -> HardState:
    r = _reader(data, "hard state")
    if r.left != _HARD_STATE.size:
        raise DecodeError(f"a hard state is {_HARD_STATE.size} bytes, got {r.left}")
    try:
        term, vote, commit = r.struct(_HARD_STATE, "hard state")
    except BinaryDecodeError as exc:
        raise DecodeError(str(exc)) from exc
    return HardState(term, vote, commit)


def encode_snapshot_meta(meta: SnapshotMeta) -> bytes:
    conf = encode_conf_state(meta.conf_state)
    try:
        w = Writer()
        w.struct(_SNAPSHOT_META, meta.index, meta.term, len(conf))
        w.put(conf)
        return w.bytes()
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {meta!r}: {exc}") from exc


def decode_snapshot_meta(data: Buffer) -> SnapshotMeta:
    r = _reader(data, "snapshot metadata")
    if r.left < _SNAPSHOT_META.size:
        raise DecodeError("truncated snapshot metadata")
    try:
        index, term, conf_len = r.struct(_SNAPSHOT_META, "header")
        if conf_len != r.left:
            raise DecodeError("snapshot metadata length does not match")
        return SnapshotMeta(index, term, decode_conf_state(r.take(conf_len, "configuration")))
    except BinaryDecodeError as exc:
        raise DecodeError(str(exc)) from exc
