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
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

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

_ENCODE_ERRORS = (struct.error, OverflowError, TypeError, AttributeError)
_DECODE_ERRORS = (struct.error, ValueError, IndexError, OverflowError, TypeError)

Buffer = bytes | bytearray | memoryview


def _byte_view(data: Buffer) -> memoryview:
    try:
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1 or view.format != "B":
            view = view.cast("B")
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"cannot read the input as bytes: {exc}") from exc
    return view


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
        n = len(entries)
        header_size = _HEADER.size + len(context)
        block = bytearray(header_size + n * _ENTRY.size)
        _HEADER.pack_into(
            block,
            0,
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
            n,
            len(context),
        )
        block[_HEADER.size : header_size] = context
        buffers: list[bytes | memoryview] = [b""]
        offset = header_size
        pack_entry = _ENTRY.pack_into
        for entry in entries:
            payload = entry.payload
            pack_entry(block, offset, entry.index, entry.term, entry.kind, entry.timestamp_ms, len(payload))
            offset += _ENTRY.size
            if payload:
                buffers.append(payload)
        buffers[0] = bytes(block)
        if snapshot is not None:
            conf = encode_conf_state(snapshot.meta.conf_state)
            meta = snapshot.meta
            buffers.append(_SNAPSHOT.pack(meta.index, meta.term, len(conf), len(snapshot.data)) + conf)
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
    view = _byte_view(data)
    size = len(view)
    try:
        if size < _HEADER.size:
            raise DecodeError(f"truncated message: {size} bytes, the header alone is {_HEADER.size}")
        (version, mtype, flags, to, sender, term, log_term, index, commit, reject_hint, n, context_len) = (
            _HEADER.unpack_from(view, 0)
        )
        if version != WIRE_VERSION:
            raise DecodeError(f"unknown wire version {version}")
        if flags & ~_KNOWN_FLAGS:
            raise DecodeError(f"unknown flags {flags:#x}")
        if mtype >= len(_MESSAGE_TYPES):
            raise DecodeError(f"unknown message type {mtype}")
        if to == 0 or sender == 0:
            raise DecodeError("node ids must be > 0")
        offset = _HEADER.size
        if offset + context_len + n * _ENTRY.size > size:
            raise DecodeError("truncated message: context or entry table runs past the end")
        context = bytes(view[offset : offset + context_len])
        offset += context_len
        table_end = offset + n * _ENTRY.size
        entries: list[Entry] = []
        if n:
            kinds = _ENTRY_KINDS
            position = table_end
            append = entries.append
            for e_index, e_term, e_kind, e_time, e_len in _ENTRY.iter_unpack(view[offset:table_end]):
                end = position + e_len
                if end > size:
                    raise DecodeError("truncated message: a payload runs past the end")
                append(Entry(e_index, e_term, kinds[e_kind], e_time, view[position:end]))
                position = end
            offset = position
        else:
            offset = table_end
        snapshot = None
        if flags & _HAS_SNAPSHOT:
            if offset + _SNAPSHOT.size > size:
                raise DecodeError("truncated message: snapshot header runs past the end")
            s_index, s_term, conf_len, data_len = _SNAPSHOT.unpack_from(view, offset)
            offset += _SNAPSHOT.size
            if offset + conf_len + data_len > size:
                raise DecodeError("truncated message: snapshot runs past the end")
            conf_state = decode_conf_state(view[offset : offset + conf_len])
            offset += conf_len
            snapshot = Snapshot(SnapshotMeta(s_index, s_term, conf_state), bytes(view[offset : offset + data_len]))
            offset += data_len
        if offset != size:
            raise DecodeError(f"{size - offset} trailing bytes after the message")
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


def _pack_ids(ids: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(ids)}Q", *ids)


def encode_conf_state(conf_state: ConfState) -> bytes:
    """Encode a configuration (for snapshot metadata and storage adapters)."""
    try:
        cs = conf_state
        return b"".join(
            (
                _CONF_STATE.pack(
                    1 if cs.auto_leave else 0,
                    len(cs.voters),
                    len(cs.learners),
                    len(cs.voters_outgoing),
                    len(cs.learners_next),
                ),
                _pack_ids(cs.voters),
                _pack_ids(cs.learners),
                _pack_ids(cs.voters_outgoing),
                _pack_ids(cs.learners_next),
            )
        )
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {conf_state!r}: {exc}") from exc


def decode_conf_state(data: Buffer) -> ConfState:
    view = _byte_view(data)
    try:
        if len(view) < _CONF_STATE.size:
            raise DecodeError("truncated configuration")
        auto_leave, *counts = _CONF_STATE.unpack_from(view, 0)
        if auto_leave > 1:
            raise DecodeError(f"bad auto_leave flag {auto_leave}")
        if _CONF_STATE.size + 8 * sum(counts) != len(view):
            raise DecodeError("configuration length does not match its id counts")
        offset = _CONF_STATE.size
        groups: list[tuple[int, ...]] = []
        for count in counts:
            ids = struct.unpack_from(f"<{count}Q", view, offset)
            offset += 8 * count
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
        parts = [_CONF_CHANGE.pack(WIRE_VERSION, change.transition, len(change.changes), len(change.context))]
        parts.extend(_CONF_CHANGE_SINGLE.pack(single.type, single.node_id) for single in change.changes)
        parts.append(change.context)
        return b"".join(parts)
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {change!r}: {exc}") from exc


def decode_conf_change(data: Buffer) -> ConfChange:
    view = _byte_view(data)
    try:
        if len(view) < _CONF_CHANGE.size:
            raise DecodeError("truncated configuration change")
        version, transition, n, context_len = _CONF_CHANGE.unpack_from(view, 0)
        if version != WIRE_VERSION:
            raise DecodeError(f"unknown configuration change version {version}")
        offset = _CONF_CHANGE.size
        if offset + n * _CONF_CHANGE_SINGLE.size + context_len != len(view):
            raise DecodeError("configuration change length does not match its counts")
        changes = []
        for change_type, node_id in _CONF_CHANGE_SINGLE.iter_unpack(
            view[offset : offset + n * _CONF_CHANGE_SINGLE.size]
        ):
            if node_id == 0:
                raise DecodeError("node ids must be > 0")
            changes.append(ConfChangeSingle(_CONF_CHANGE_TYPES[change_type], node_id))
        offset += n * _CONF_CHANGE_SINGLE.size
        return ConfChange(tuple(changes), _TRANSITIONS[transition], bytes(view[offset:]))
    except DecodeError:
        raise
    except _DECODE_ERRORS as exc:
        raise DecodeError(f"malformed configuration change: {exc}") from exc


# --- states --------------------------------------------------------------------------------------------------


def encode_hard_state(hard_state: HardState) -> bytes:
    try:
        return _HARD_STATE.pack(hard_state.term, hard_state.vote, hard_state.commit)
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {hard_state!r}: {exc}") from exc


def decode_hard_state(data: Buffer) -> HardState:
    view = _byte_view(data)
    if len(view) != _HARD_STATE.size:
        raise DecodeError(f"a hard state is {_HARD_STATE.size} bytes, got {len(view)}")
    term, vote, commit = _HARD_STATE.unpack_from(view, 0)
    return HardState(term, vote, commit)


def encode_snapshot_meta(meta: SnapshotMeta) -> bytes:
    conf = encode_conf_state(meta.conf_state)
    try:
        return _SNAPSHOT_META.pack(meta.index, meta.term, len(conf)) + conf
    except _ENCODE_ERRORS as exc:
        raise EncodeError(f"cannot encode {meta!r}: {exc}") from exc


def decode_snapshot_meta(data: Buffer) -> SnapshotMeta:
    view = _byte_view(data)
    if len(view) < _SNAPSHOT_META.size:
        raise DecodeError("truncated snapshot metadata")
    index, term, conf_len = _SNAPSHOT_META.unpack_from(view, 0)
    if _SNAPSHOT_META.size + conf_len != len(view):
        raise DecodeError("snapshot metadata length does not match")
    return SnapshotMeta(index, term, decode_conf_state(view[_SNAPSHOT_META.size :]))
