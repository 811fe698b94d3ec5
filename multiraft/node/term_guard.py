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

The scheduler records a Ready's new terms here before the Ready's hard state goes to the store, so a recorded
term is never below a stored one. One small file, ``<data_dir>/raft-terms``, replaced atomically (write, fsync,
rename, fsync the directory) when a term rises, which happens only in elections. Format: ``MRTG``, version
(u32), count (u64), ``count`` pairs of (group id, term) as u64, CRC32C of all before it (u32). A damaged file
is set aside and ignored (the store's own hard states still protect an intact store).
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
_VERSION = 1
_HEADER = struct.Struct("<4sIQ")
_PAIR = struct.Struct("<QQ")
_CRC = struct.Struct("<I")
_MAX_GROUPS = 1 << 24  # far above any node's replica count; bounds what a damaged header can ask for


class TermGuard(SchedulerOwned):
    """The recorded terms of one node (scheduler thread once the scheduler runs)."""

    def __init__(self, path: Path, terms: dict[int, int], owner: ThreadOwner) -> None:
        self.owner = owner
        self.path = path
        self._terms = terms
        self.writes = 0

    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], owner: ThreadOwner) -> TermGuard:
        """Load ``<data_dir>/raft-terms`` (none yet: nothing recorded)."""
        path = Path(data_dir) / TERMS_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path, {}, owner)
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        try:
            terms = _decode(raw)
        except ValueError as exc:
            aside = path.with_name(f"{TERMS_FILE}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
            log.error("the recorded Raft terms are damaged; set aside and ignored", path=str(path), error=str(exc))
            try:
                path.rename(aside)
            except OSError as rename_exc:
                raise StorageError(f"cannot set the damaged {path} aside: {rename_exc}") from rename_exc
            terms = {}
        return cls(path, terms, owner)

    def floor(self, group_id: int) -> int:
        """The highest term recorded for the group (0: none)."""
        return self._terms.get(group_id, 0)

    @on_owner_thread
    def record(self, terms: Mapping[int, int]) -> None:
        """Record the groups' terms, durably, before anything acts on them; a no-op unless one rises.

        Raises :class:`StorageFullError` when the disk has no room for the new file (the round waits and is
        retried, as for the store), :class:`StorageError` for other failures; the old file then stands."""
        rising = {group: term for group, term in terms.items() if term > self._terms.get(group, 0)}
        if not rising:
            return
        updated = {**self._terms, **rising}
        self._write(updated)
        self._terms = updated
        self.writes += 1

    def _write(self, terms: dict[int, int]) -> None:
        if len(terms) > _MAX_GROUPS:
            raise StorageError(f"{self.path}: more than {_MAX_GROUPS} groups")
        body = bytearray(_HEADER.pack(_MAGIC, _VERSION, len(terms)))
        for group, term in sorted(terms.items()):
            body += _PAIR.pack(group, term)
        body += _CRC.pack(crc32c.crc32c(bytes(body)))
        staging = self.path.with_name(f"{TERMS_FILE}.new")
        try:
            fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, body)
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


def _decode(raw: bytes) -> dict[int, int]:
    """The recorded terms; ValueError naming what is wrong with a damaged file."""
    if len(raw) < _HEADER.size + _CRC.size:
        raise ValueError(f"{len(raw)} bytes is shorter than a header")
    magic, version, count = _HEADER.unpack_from(raw)
    if magic != _MAGIC or version != _VERSION:
        raise ValueError(f"not a terms file of version {_VERSION} (magic {magic!r}, version {version})")
    if count > _MAX_GROUPS or len(raw) != _HEADER.size + count * _PAIR.size + _CRC.size:
        raise ValueError(f"{len(raw)} bytes does not hold the {count} pairs the header claims")
    (crc,) = _CRC.unpack_from(raw, len(raw) - _CRC.size)
    if crc32c.crc32c(raw[: -_CRC.size]) != crc:
        raise ValueError("CRC mismatch")
    return dict(_PAIR.iter_unpack(raw[_HEADER.size : -_CRC.size]))
