"""Offline check and repair of a log store: ``multiraft storage check|repair DIR``.

Check works in two passes. First LMDB's own offline verifier walks every page of the file in pure Python,
so a truncated or bit-flipped file can never crash the checker. Then, reading only the B-trees that passed,
it walks every log: index continuity, entry CRCs, terms, record batch CRCs, offsets, and the segment records
and indexes against the entries.

Repair rebuilds the store: for each log it copies the longest valid prefix (entries, segment boundaries,
compaction point, hard state, attributes) into a fresh environment, then swaps it in and keeps the damaged
one beside it as ``log.lmdb.damaged-<time>``. Nothing of the old file is modified, and no damaged tree is
read. A log cut short this way catches up from its Raft leader; its commit index is lowered to what it kept.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb

from storage import _format as fmt
from storage._entries import EntryKind, HardState
from storage._lmdb import verify_structure
from storage._store import LogStore
from storage.batch import validate_batch
from storage.config import StorageConfig
from storage.errors import BatchFormatError, StorageError, UnrepairableStoreError

__all__ = [
    "Problem",
    "LogCheck",
    "CheckReport",
    "Dropped",
    "RepairReport",
    "check_store",
    "repair_store",
    "set_aside_store",
]

_DB_IN_MESSAGE = re.compile(r"^main/(\S+) DB:")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong, and where."""

    path: str
    message: str
    log: str | None = None
    index: int | None = None

    def __str__(self) -> str:
        where = self.path if self.log is None else f"{self.path} log {self.log}"
        if self.index is not None:
            where += f" index {self.index}"
        return f"{where}: {self.message}"


@dataclass(frozen=True, slots=True)
class LogCheck:
    """What check found in one log. ``last_good_index`` ends the valid prefix."""

    name: str
    first_index: int
    last_index: int
    last_good_index: int
    entries_checked: int
    bytes_checked: int
    problems: tuple[Problem, ...]


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The result of :func:`check_store`."""

    path: str
    structural_problems: tuple[str, ...]
    unrecoverable: str | None
    logs: tuple[LogCheck, ...]

    @property
    def problems(self) -> list[Problem]:
        found = [Problem(self.path, message) for message in self.structural_problems]
        if self.unrecoverable:
            found.append(Problem(self.path, self.unrecoverable))
        return found + [p for log_check in self.logs for p in log_check.problems]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def entries_checked(self) -> int:
        return sum(c.entries_checked for c in self.logs)

    @property
    def bytes_checked(self) -> int:
        return sum(c.bytes_checked for c in self.logs)


@dataclass(frozen=True, slots=True)
class Dropped:
    """Entries a repair could not keep."""

    log: str
    first_index: int
    last_index: int
    reason: str

    @property
    def entries(self) -> int:
        return self.last_index - self.first_index + 1


@dataclass(frozen=True, slots=True)
class RepairReport:
    """The result of :func:`repair_store`."""

    path: str
    repaired: bool
    dropped: tuple[Dropped, ...] = ()
    damaged_copy: str | None = None
    notes: tuple[str, ...] = field(default=())


def _env_dir(path: str | os.PathLike[str]) -> Path:
    return Path(path) / fmt.ENV_DIRNAME


def _damaged_trees(structural: list[str]) -> tuple[set[str], str | None]:
    """Names of named databases the verifier flagged, and a reason if the store cannot be read at all."""
    damaged: set[str] = set()
    fatal = None
    for message in structural:
        match = _DB_IN_MESSAGE.match(message)
        if match:
            damaged.add(match.group(1))
        elif message.startswith("main DB:"):
            fatal = "the main database (the directory of logs) is damaged"
        elif message.startswith(("freeDB", "free DB")) or "neither reachable nor in the freeDB" in message:
            continue  # the free list matters to writers only; check and repair never write to this file
        elif " DB:" not in message:
            fatal = fatal or f"the file cannot be read: {message}"
    if "meta" in damaged:
        fatal = "the store's metadata database is damaged"
    return damaged, fatal


class _Walker:
    """Walks the logs of a read-only environment, touching only B-trees that passed structural checks."""

    def __init__(self, env: lmdb.Environment, txn: lmdb.Transaction, data_file: str, damaged: set[str]) -> None:
        self.env, self.txn, self.data_file, self.damaged = env, txn, data_file, damaged
        self.meta = env.open_db(txn=txn)

    def logs(self) -> list[tuple[str, int]]:
        found = []
        for key, value in self._prefixed(fmt.LOG_NAMES):
            found.append((bytes(key[len(fmt.LOG_NAMES) :]).decode(), fmt.U32.unpack(value)[0]))
        return found

    def log_state(self, log_id: int) -> tuple[HardState, tuple[int, int], list[fmt.SegmentRecord], dict[str, bytes]]:
        get = self.txn.get
        raw = get(fmt.log_key(b"h", log_id), db=self.meta)
        hard = HardState(*fmt.HARD_STATE.unpack(raw)) if raw else HardState()
        raw = get(fmt.log_key(b"c", log_id), db=self.meta)
        compaction = fmt.COMPACTION.unpack(raw) if raw else (0, 0)
        segments = [fmt.SegmentRecord.unpack(v) for _, v in self._prefixed(fmt.log_key(b"s", log_id))]
        prefix = fmt.log_key(b"a", log_id)
        attributes = {bytes(k[len(prefix) :]).decode(): bytes(v) for k, v in self._prefixed(prefix)}
        return hard, compaction, segments, attributes

    def _prefixed(self, prefix: bytes) -> Iterator[tuple[Any, Any]]:
        cursor = self.txn.cursor(db=self.meta)
        if cursor.set_range(prefix):
            for key, value in cursor.iternext():
                if not bytes(key).startswith(prefix):
                    break
                yield key, value

    def segment_values(self, record: fmt.SegmentRecord) -> Iterator[tuple[int, Any]]:
        """(index, value) of a segment in key order; raises if its tree is damaged."""
        name = fmt.slot_name(record.slot)
        if name.decode() in self.damaged:
            raise _SegmentDamagedError(f"segment database {name.decode()} failed the structural check")
        db = self.env.open_db(name, txn=self.txn, create=False)
        for key, value in self.txn.cursor(db=db).iternext():
            yield fmt.INDEX_KEY.unpack(key)[0], value


class _SegmentDamagedError(Exception):
    pass


@dataclass
class _ValidPrefix:
    """The longest valid prefix of one log, segment by segment, and the first problem after it."""

    name: str
    hard_state: HardState
    compaction: tuple[int, int]
    attributes: dict[str, bytes]
    claimed_last: int
    segments: list[tuple[fmt.SegmentRecord, int]] = field(default_factory=list)  # (record, entries kept)
    problem: Problem | None = None
    entries: int = 0
    size: int = 0

    @property
    def last_good(self) -> int:
        return self.segments[-1][0].base_index + self.segments[-1][1] - 1 if self.segments else self.compaction[0]


def _walk_log(walker: _Walker, name: str, log_id: int) -> _ValidPrefix:
    hard, compaction, segments, attributes = walker.log_state(log_id)
    claimed_last = max([r.last_index for r in segments if r.entry_count] or [compaction[0]])
    prefix = _ValidPrefix(name, hard, compaction, attributes, claimed_last)
    expected_index, term = compaction[0] + 1, compaction[1]
    expected_offset = segments[0].base_offset if segments else 0

    partial: list[tuple[fmt.SegmentRecord, int]] = []  # the segment being walked and its entries so far

    def metadata_problem(message: str, index: int) -> None:
        if prefix.problem is None:
            prefix.problem = Problem(walker.data_file, message, name, index)

    def fail(message: str, index: int | None) -> _ValidPrefix:
        prefix.problem = Problem(walker.data_file, message, name, index)
        prefix.segments += [(record, kept) for record, kept in partial if kept]
        return prefix

    if not segments:
        return fail("log has no segment records", None)
    for record in segments:
        if record.base_index != expected_index:
            return fail(f"segment starts at {record.base_index}, expected {expected_index}", expected_index)
        if record.base_offset != expected_offset:
            return fail(f"segment starts at offset {record.base_offset}, expected {expected_offset}", record.base_index)
        kept = size = 0
        max_record_ts = -1
        partial[:] = [(record, 0)]
        try:
            for index, value in walker.segment_values(record):
                if index != expected_index:
                    return fail(f"entry {expected_index} is missing", expected_index)
                if not fmt.value_crc_ok(fmt.INDEX_KEY.pack(index), value):
                    return fail("entry CRC mismatch", index)
                entry_term, kind, _, header_next_offset, header_max_ts, _ = fmt.ENTRY_HEADER.unpack_from(value)
                if entry_term < term:
                    return fail(f"term {entry_term} is lower than the previous entry's {term}", index)
                if kind not in {int(k) for k in EntryKind}:
                    return fail(f"unknown entry kind {kind}", index)
                if kind == EntryKind.DATA:
                    try:
                        batch = validate_batch(value, fmt.ENTRY_HEADER_SIZE)
                    except BatchFormatError as exc:
                        return fail(f"record batch: {exc}", index)
                    if batch.base_offset != expected_offset or batch.length != len(value) - fmt.ENTRY_HEADER_SIZE:
                        return fail(f"batch at offset {batch.base_offset}, expected {expected_offset}", index)
                    expected_offset += batch.record_count
                    max_record_ts = max(max_record_ts, batch.max_timestamp)
                if (header_next_offset, header_max_ts) != (expected_offset, max_record_ts):
                    return fail("entry header's offset or timestamp disagrees with the entries before it", index)
                term = entry_term
                expected_index += 1
                kept += 1
                partial[:] = [(record, kept)]
                size += len(value)
                prefix.entries += 1
                prefix.size += len(value)
                if index == record.last_index:
                    break
        except _SegmentDamagedError as exc:
            return fail(str(exc), expected_index)
        partial.clear()
        prefix.segments.append((record, kept))
        # Metadata that disagrees with valid entries costs no data: repair rebuilds it from the entries.
        if kept != record.entry_count or size != record.size_bytes or expected_offset != record.next_offset:
            metadata_problem(
                f"segment record says {record.entry_count} entries/{record.size_bytes} bytes/next offset "
                f"{record.next_offset}, found {kept}/{size}/{expected_offset}",
                record.base_index,
            )
    return prefix


def _open_read_only(env_dir: Path) -> lmdb.Environment:
    return lmdb.open(str(env_dir), readonly=True, max_dbs=1 << 20, lock=False)


def _walk_store(path: str | os.PathLike[str]) -> tuple[list[str], str | None, list[_ValidPrefix]]:
    env_dir = _env_dir(path)
    data_file = env_dir / "data.mdb"
    if not data_file.exists():
        return [], f"no log store at {env_dir}", []
    structural = verify_structure(data_file)
    damaged, fatal = _damaged_trees(structural)
    if fatal:
        return structural, fatal, []
    try:
        env = _open_read_only(env_dir)
    except lmdb.Error as exc:
        return structural, f"LMDB cannot open the file: {exc}", []
    try:
        with env.begin(buffers=True) as txn:
            walker = _Walker(env, txn, str(data_file), damaged)
            return structural, None, [_walk_log(walker, name, log_id) for name, log_id in walker.logs()]
    except lmdb.Error as exc:
        return structural, f"LMDB failed while reading: {exc}", []
    finally:
        env.close()


def check_store(path: str | os.PathLike[str]) -> CheckReport:
    """Check every log of the store in data directory ``path``; never modifies it."""
    structural, fatal, prefixes = _walk_store(path)
    logs = tuple(
        LogCheck(
            name=p.name,
            first_index=p.compaction[0] + 1,
            last_index=p.claimed_last,
            last_good_index=p.last_good,
            entries_checked=p.entries,
            bytes_checked=p.size,
            problems=() if p.problem is None else (p.problem,),
        )
        for p in prefixes
    )
    return CheckReport(str(_env_dir(path)), tuple(structural), fatal, logs)


def repair_store(path: str | os.PathLike[str], config: StorageConfig | None = None) -> RepairReport:
    """Rebuild the store from the valid prefix of every log; report what was dropped."""
    env_dir = _env_dir(path)
    structural, fatal, prefixes = _walk_store(path)
    if fatal:
        raise UnrepairableStoreError(
            f"cannot repair the store: {fatal}. Set it aside (a node does so itself); the node's replicas are "
            "then re-created from their peers",
            path=str(env_dir),
        )
    if not structural and all(p.problem is None for p in prefixes):
        return RepairReport(str(env_dir), repaired=False, notes=("no problems found",))
    staging = Path(path) / f".repair-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    dropped: list[Dropped] = []
    notes: list[str] = []
    try:
        env = _open_read_only(env_dir)
        try:
            with env.begin(buffers=True) as txn, LogStore.open(staging, config) as rebuilt:
                walker = _Walker(env, txn, str(env_dir / "data.mdb"), _damaged_trees(structural)[0])
                for prefix in prefixes:
                    _copy_prefix(walker, prefix, rebuilt)
                    if prefix.problem is not None:
                        reason = prefix.problem.message
                        if prefix.last_good < prefix.claimed_last:
                            dropped.append(Dropped(prefix.name, prefix.last_good + 1, prefix.claimed_last, reason))
                        else:
                            notes.append(f"{prefix.name}: rebuilt its records and indexes ({reason})")
                    if prefix.hard_state.commit > prefix.last_good:
                        notes.append(
                            f"{prefix.name}: commit index lowered from {prefix.hard_state.commit} to "
                            f"{prefix.last_good}; it will catch up from its leader"
                        )
        finally:
            env.close()
    except lmdb.Error as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise StorageError(f"cannot repair {env_dir}: LMDB failed while copying the valid prefix: {exc}") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    damaged_copy = env_dir.with_name(f"{fmt.ENV_DIRNAME}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
    _swap_in(env_dir, staging / fmt.ENV_DIRNAME, damaged_copy)
    shutil.rmtree(staging, ignore_errors=True)
    return RepairReport(str(env_dir), True, tuple(dropped), str(damaged_copy), tuple(notes))


def set_aside_store(path: str | os.PathLike[str]) -> str:
    """Move a store that cannot be repaired out of the way (kept for inspection, never deleted); returns where.

    The next :meth:`LogStore.open` of ``path`` creates an empty store."""
    env_dir = _env_dir(path)
    aside = env_dir.with_name(f"{fmt.ENV_DIRNAME}.unrepairable-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    try:
        env_dir.rename(aside)
        fd = os.open(env_dir.parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename is durable before anything is written to a new store
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(f"cannot set {env_dir} aside to {aside}: {exc}") from exc
    return str(aside)


def _swap_in(env_dir: Path, rebuilt: Path, damaged_copy: Path) -> None:
    """Keep the damaged environment as ``damaged_copy`` and move the rebuilt one into its place."""
    try:
        env_dir.rename(damaged_copy)
    except OSError as exc:
        raise StorageError(f"cannot repair {env_dir}: cannot move it aside to {damaged_copy}: {exc}") from exc
    try:
        rebuilt.rename(env_dir)
    except OSError as exc:
        try:
            damaged_copy.rename(env_dir)  # put the original back: the store is as it was before the repair
        except OSError:
            raise StorageError(
                f"cannot repair {env_dir}: cannot move the rebuilt store {rebuilt} into place ({exc}), nor the "
                f"original back from {damaged_copy}"
            ) from exc
        raise StorageError(f"cannot repair {env_dir}: cannot move the rebuilt store into place: {exc}") from exc


def _copy_prefix(walker: _Walker, prefix: _ValidPrefix, rebuilt: LogStore) -> None:
    topic, _, partition = prefix.name.rpartition("/")
    target = rebuilt.log(topic, int(partition))
    compaction_index, compaction_term = prefix.compaction
    first_offset = prefix.segments[0][0].base_offset if prefix.segments else 0
    if compaction_index or first_offset:
        target.reset(compaction_index, compaction_term, first_offset)
    prev_term = compaction_term
    for record, kept in prefix.segments:
        if not kept:
            continue
        values = _take(walker.segment_values(record), kept)
        target._append_stored_segment(record.base_index, prev_term, record.base_offset, values, walker.data_file)
        prev_term = target.term(target.last_index())
    last = target.last_index()
    hard = prefix.hard_state
    target.set_hard_state(HardState(hard.term, hard.vote, min(hard.commit, last)))
    for name, value in prefix.attributes.items():
        target.set_attribute(name, value)
    rebuilt.sync()


def _take(values: Iterator[tuple[int, Any]], count: int) -> Iterator[tuple[int, Any]]:
    for position, item in enumerate(values):
        if position >= count:
            return
        yield item
