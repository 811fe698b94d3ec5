"""The highest Raft term each replica of this node ever reached, kept outside the log store.

Raft's safety rests on a replica never voting twice in one term and never forgetting entries it acknowledged;
both live in the log store (the hard state, the log). When that store is lost (its LMDB main database cut away,
say), the node rebuilds every replica from its peers, and this file is what keeps the rebuilt replicas honest:

* a replica whose stored term is below the one recorded here may have voted in the recorded term, so it starts
  in that term with its vote unknown (it votes again only in a later term);
* a replica with nothing stored at all but a recorded term lost its log: it starts one term higher (so its
  leader of old steps down and stale acknowledgements of its lost log are ignored) and neither votes nor
  campaigns until it holds an entry of a later term than any it had (``RawNode(recover_until=...)``), which
  proves it holds every entry committed before it lost its log.

A replica the node gave up on purpose is different: once its node applied the configuration that removed it,
nothing it acknowledged is needed any more (that configuration was committed by a quorum without it), so the
node marks the group **released** here before it deletes the log. A replica placed on the node again later
is then an ordinary new replica: it starts in the recorded term with its vote unknown (so it never votes twice
in a term) and votes and campaigns as any new replica does. Opening it takes the mark away again
(:meth:`TermGuard.reclaim`), before it stores anything, so a store lost after that is treated as above. A
replica dropped without that proof (its removal never reached it) is not released and is rebuilt as one that
lost its log.

The scheduler records a Ready's new terms here before the Ready's hard state goes to the store, so a recorded
term is never below a stored one. One small file, ``<data_dir>/raft-terms``, replaced atomically (write, fsync,
rename, fsync the directory) when a term rises (only in elections) or a mark changes (only when a replica is
dropped or placed again). Format: ``MRTG``, version (u32), count (u64), ``count`` records, CRC32C of all
before it (u32); a record is (group id, term) as u64 in version 1, and (group id, term, flags) as u64, u64, u32
in version 2 (flag 1: released). Version 1 files are read. A damaged file is set aside and ignored (the store's
own hard states still protect an intact store).
"""

from __future__ import annotations

import errno
import os
import struct
import time
from collections.abc import Mapping
from pathlib import Path

import crc32c

from multiraft.logging import get_logger
from multiraft.node.threads import SchedulerOwned, ThreadOwner, on_owner_thread
from storage import StorageError, StorageFullError

__all__ = ["TermGuard", "TERMS_FILE"]

log = get_logger(__name__)

TERMS_FILE = "raft-terms"
_MAGIC = b"MRTG"
_VERSION = 2
_HEADER = struct.Struct("<4sIQ")
_RECORDS = {1: struct.Struct("<QQ"), 2: struct.Struct("<QQI")}
_RELEASED = 1
_CRC = struct.Struct("<I")
_MAX_GROUPS = 1 << 24  # far above any node's replica count; bounds what a damaged header can ask for


class TermGuard(SchedulerOwned):
    """The recorded terms of one node (scheduler thread once the scheduler runs)."""

    def __init__(self, path: Path, terms: dict[int, int], owner: ThreadOwner, released: frozenset[int]) -> None:
        self.owner = owner
        self.path = path
        self._terms = terms
        self._released = released
        self.writes = 0

    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], owner: ThreadOwner) -> TermGuard:
        """Load ``<data_dir>/raft-terms`` (none yet: nothing recorded)."""
        path = Path(data_dir) / TERMS_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path, {}, owner, frozenset())
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        try:
            terms, released = _decode(raw)
        except ValueError as exc:
            aside = path.with_name(f"{TERMS_FILE}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
            log.error("the recorded Raft terms are damaged; set aside and ignored", path=str(path), error=str(exc))
            try:
                path.rename(aside)
            except OSError as rename_exc:
                raise StorageError(f"cannot set the damaged {path} aside: {rename_exc}") from rename_exc
            terms, released = {}, frozenset()
        return cls(path, terms, owner, released)

    def floor(self, group_id: int) -> int:
        """The highest term recorded for the group (0: none)."""
        return self._terms.get(group_id, 0)

    def released(self, group_id: int) -> bool:
        """True when this node dropped the group's replica after applying its removal (see the module notes)."""
        return group_id in self._released

    @on_owner_thread
    def release(self, group_id: int) -> None:
        """Mark the group released, durably, before its replica's log is deleted (after its removal applied)."""
        if group_id not in self._released:
            self._write(self._terms, self._released | {group_id})
            self._released = self._released | {group_id}
            self.writes += 1

    @on_owner_thread
    def reclaim(self, group_id: int) -> None:
        """Take the mark away, durably, as a replica of the group is placed here again and before it stores
        anything: from then on a store that loses its log is the case the recorded term guards."""
        if group_id in self._released:
            self._write(self._terms, self._released - {group_id})
            self._released = self._released - {group_id}
            self.writes += 1

    @on_owner_thread
    def record(self, terms: Mapping[int, int]) -> None:
        """Record the groups' terms, durably, before anything acts on them; a no-op unless one rises.

        Raises :class:`StorageFullError` when the disk has no room for the new file (the round waits and is
        retried, as for the store), :class:`StorageError` for other failures; the old file then stands."""
        rising = {group: term for group, term in terms.items() if term > self._terms.get(group, 0)}
        if not rising:
            return
        updated = {**self._terms, **rising}
        self._write(updated, self._released)
        self._terms = updated
        self.writes += 1

    def _write(self, terms: dict[int, int], released: frozenset[int]) -> None:
        groups = sorted(terms.keys() | released)
        if len(groups) > _MAX_GROUPS:
            raise StorageError(f"{self.path}: more than {_MAX_GROUPS} groups")
        body = bytearray(_HEADER.pack(_MAGIC, _VERSION, len(groups)))
        record = _RECORDS[_VERSION]
        for group in groups:
            body += record.pack(group, terms.get(group, 0), _RELEASED if group in released else 0)
        body += _CRC.pack(crc32c.crc32c(bytes(body)))
        staging = self.path.with_name(f"{TERMS_FILE}.new")
        try:
            fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(body)
                while view:  # a write may take only part of it (a nearly full disk)
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            staging.replace(self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageFullError(f"no room to record Raft terms in {self.path}: {exc}") from exc
            raise StorageError(f"cannot record Raft terms in {self.path}: {exc}") from exc


def _decode(raw: bytes) -> tuple[dict[int, int], frozenset[int]]:
    """The recorded terms and released groups; ValueError naming what is wrong with a damaged file."""
    if len(raw) < _HEADER.size + _CRC.size:
        raise ValueError(f"{len(raw)} bytes is shorter than a header")
    magic, version, count = _HEADER.unpack_from(raw)
    record = _RECORDS.get(version)
    if magic != _MAGIC or record is None:
        raise ValueError(f"not a terms file of a known version (magic {magic!r}, version {version})")
    if count > _MAX_GROUPS or len(raw) != _HEADER.size + count * record.size + _CRC.size:
        raise ValueError(f"{len(raw)} bytes does not hold the {count} records the header claims")
    (crc,) = _CRC.unpack_from(raw, len(raw) - _CRC.size)
    if crc32c.crc32c(raw[: -_CRC.size]) != crc:
        raise ValueError("CRC mismatch")
    records = list(record.iter_unpack(raw[_HEADER.size : -_CRC.size]))
    if any(fields[2] & ~_RELEASED for fields in records if len(fields) > 2):
        raise ValueError("a record has unknown flags")
    terms = {fields[0]: fields[1] for fields in records if fields[1]}
    released = frozenset(fields[0] for fields in records if len(fields) > 2 and fields[2] & _RELEASED)
    return terms, released
