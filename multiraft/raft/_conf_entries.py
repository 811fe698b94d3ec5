"""The configuration read back from CONFIG log entries: after one entry, and as of an applied index.

Pure functions over :func:`~multiraft.raft.confchange.apply_conf_change` and the codec (which
:mod:`.confchange` cannot import: the codec imports it). :class:`~multiraft.raft._raft.Raft` uses them to start
with the configuration as of ``applied`` and to apply a committed CONFIG entry; :class:`~multiraft.raft.RawNode`
to report the configuration a Ready's committed entries lead to.
"""

from __future__ import annotations

from typing import Any

from .codec import decode_conf_change
from .confchange import ConfState, apply_conf_change
from .errors import InvalidConfChangeError, RaftCodecError, RaftStorageError
from .messages import Entry, EntryKind
from .storage import Storage

__all__ = ["conf_after", "conf_as_of"]


def conf_after(conf_state: ConfState, entry: Entry, logger: Any = None) -> ConfState | None:
    """The configuration once the CONFIG ``entry`` is applied to ``conf_state``; None if it does not apply.

    Every replica skips the same invalid entry (and logs it when given a logger), so they still agree.
    """
    try:
        return apply_conf_change(conf_state, decode_conf_change(entry.payload))
    except (RaftCodecError, InvalidConfChangeError) as exc:
        if logger is not None:
            logger.error("raft.conf_change_skipped", index=entry.index, error=str(exc))
        return None


def conf_as_of(
    storage: Storage, snapshot_index: int, snapshot_conf: ConfState, applied: int, max_size: int
) -> ConfState:
    """The configuration as of ``applied``: the snapshot's (or a later checkpoint) and the CONFIG entries after,
    read from ``storage`` ``max_size`` payload bytes at a time."""
    index, conf_state = snapshot_index, snapshot_conf
    if applied <= index:
        return conf_state
    checkpoint, checkpoint_conf = storage.conf_checkpoint(applied)
    if not snapshot_index <= checkpoint <= applied:
        raise RaftStorageError(f"configuration checkpoint {checkpoint} is outside [{snapshot_index}, {applied}]")
    if checkpoint > index:
        index, conf_state = checkpoint, checkpoint_conf
    config_kind = EntryKind.CONFIG
    while index < applied:
        entries = storage.entries(index + 1, applied + 1, max_size)
        if not entries:
            raise RaftStorageError(f"storage returned no entries in [{index + 1}, {applied}]")
        for entry in entries:
            if entry.kind == config_kind:
                conf_state = conf_after(conf_state, entry) or conf_state
        index = entries[-1].index
    return conf_state
