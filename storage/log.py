"""The segmented log of one replica, and the store that holds every log of a node.

A :class:`LogStore` is one LMDB environment per data directory (``<data_dir>/log.lmdb``). Each
topic-partition replica is a :class:`SegmentedLog` named ``<topic>/<partition>`` inside it; its segments
are LMDB named databases. ``docs/architecture.md`` records the measurement behind this layout: one
environment per node makes a group commit one transaction and two fdatasyncs for every partition in the
round, where one environment per segment costs two fdatasyncs per partition.

Threads. One *owner* thread mutates the store: append, truncate, roll, drop, sync. Everything it appends
goes into one LMDB write transaction that :meth:`LogStore.sync` commits durably, so a node syncs once per
scheduling round for all its partitions (group commit). The owner's reads (``entries``, ``term``...) see its
own unsynced appends. Other threads (fetch handlers) use :meth:`SegmentedLog.read` and the other methods
marked *any thread*: they see only what has been synced, through an immutable view published at each sync
and matched to the LMDB snapshot they read by transaction id.

A write that fails part-way (the map or the disk is full) leaves the log answering as before it, but the
pending transaction may hold part of it: every owner call then raises :class:`TransactionFailedError` until
:meth:`LogStore.rollback` discards everything since the last sync. Synced data is never touched.

Crash safety comes from LMDB's copy-on-write commit: after a crash, reopening yields exactly the last
committed (synced) state; an entry is never half visible. Every entry carries a CRC over its index, header
and payload, checked on every read, so a flipped bit is reported as :class:`CorruptionError` naming the file
and index instead of being served.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import lmdb
import structlog

from storage import _format as fmt
from storage.batch import first_offset_at_or_after, read_header
from storage.config import StorageConfig
from storage.errors import (
    BatchFormatError,
    CompactedError,
    CorruptionError,
    EntryTooLargeError,
    InvalidArgumentError,
    InvalidEntryError,
    LogClosedError,
    SegmentFileError,
    SegmentNotFoundError,
    StorageError,
    StorageFullError,
    TransactionFailedError,
    UnavailableError,
)
from storage.segment_file import (
    SegmentFileInfo,
    iter_segment_file_values,
    read_segment_file_info,
    write_segment_file,
)

__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "EntryKind",
    "Entry",
    "EntryLike",
    "HardState",
    "SegmentInfo",
    "ReadResult",
    "LogStore",
    "SegmentedLog",
]

# A stdlib logger underneath: unconfigured, info stays silent and warnings go to stderr, never stdout.
log: structlog.stdlib.BoundLogger = structlog.wrap_logger(logging.getLogger(__name__))

ENTRY_OVERHEAD_BYTES = fmt.ENTRY_HEADER_SIZE
"""Bytes the log stores per entry besides its payload; they count toward ``segment_bytes``."""

_PUBLISH_WAIT_S = 0.05
_READ_ATTEMPTS = 200


class EntryKind(IntEnum):
    """What a Raft entry holds. Same numbering as :class:`multiraft.raft.EntryKind`."""

    DATA = 0  # a record batch
    CONFIG = 1  # a membership change
    NOOP = 2  # the empty entry a new leader appends
    CONTROL = 3  # a replicated command of the node (retention, markers)


class EntryLike(Protocol):
    """Anything with an entry's five fields; Raft's entries are passed as they are."""

    @property
    def index(self) -> int: ...
    @property
    def term(self) -> int: ...
    @property
    def kind(self) -> int: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def payload(self) -> bytes | bytearray | memoryview: ...


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored Raft entry. A data entry's payload is a record batch whose base offset the log assigned."""

    index: int
    term: int
    kind: EntryKind
    timestamp_ms: int
    payload: bytes


class HardState(NamedTuple):
    """Raft's persistent state: current term, vote in that term (0 = none), commit index."""

    term: int = 0
    vote: int = 0
    commit: int = 0


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A segment as callers see it."""

    base_index: int
    last_index: int
    base_offset: int
    next_offset: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    size_bytes: int
    entry_count: int
    sealed: bool

    @classmethod
    def of(cls, record: fmt.SegmentRecord, sealed: bool) -> SegmentInfo:
        return cls(
            base_index=record.base_index,
            last_index=record.last_index,
            base_offset=record.base_offset,
            next_offset=record.next_offset,
            first_timestamp_ms=record.first_timestamp_ms,
            max_timestamp_ms=record.max_timestamp_ms,
            size_bytes=record.size_bytes,
            entry_count=record.entry_count,
            sealed=sealed,
        )


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Record batches read from a log, concatenated as stored."""

    data: bytes
    batch_count: int
    next_offset: int  # offset after the last record returned (the offset to read next)
    log_start_offset: int
    log_end_offset: int  # offset after the last synced record


@dataclass(frozen=True, slots=True)
class _View:
    """The synced state of one log; readers in other threads use it with an LMDB snapshot of the same txn."""

    segments: tuple[fmt.SegmentRecord, ...]
    compaction_index: int
    compaction_term: int
    valid_from_txn: int

    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def end_offset(self) -> int:
        return self.segments[-1].next_offset


def _name_of(topic: str, partition: int) -> str:
    if not topic or "/" in topic or "\x00" in topic or len(topic.encode()) > 249:
        raise InvalidArgumentError(f"invalid topic name {topic!r}")
    if not isinstance(partition, int) or partition < 0:
        raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
    return f"{topic}/{partition}"


def _storage_error(exc: lmdb.Error, path: Path, index: int | None = None) -> StorageError:
    """Our error for one of lmdb's (the caller raises it ``from exc``)."""
    if isinstance(exc, lmdb.MapFullError):
        return StorageFullError(f"LMDB map is full ({path}); raise map_size_bytes")
    if isinstance(
        exc,
        (
            lmdb.CorruptedError,
            lmdb.PageNotFoundError,
            lmdb.BadValsizeError,
            lmdb.PanicError,
            lmdb.InvalidError,
            lmdb.VersionMismatchError,
        ),
    ):
        return CorruptionError(f"LMDB reports {type(exc).__name__}: {exc}", path=str(path), index=index)
    if "No space left" in str(exc) or getattr(exc, "errno", None) == errno.ENOSPC:
        return StorageFullError(f"disk full writing {path}")
    where = path if index is None else f"{path} at index {index}"
    return StorageError(f"LMDB error on {where}: {exc}")


@contextmanager
def _lmdb_errors(path: Path, index: int | None = None) -> Iterator[None]:
    """Map lmdb's exceptions to ours at the boundary."""
    try:
        yield
    except lmdb.Error as exc:
        raise _storage_error(exc, path, index) from exc


class LogStore:
    """Every log of one node (or disk), in one LMDB environment. Open with :meth:`open`."""

    def __init__(self, path: Path, env: lmdb.Environment, config: StorageConfig) -> None:
        self.path = path
        self.config = config
        self._env = env
        self._data_file = path / fmt.ENV_DIRNAME / "data.mdb"
        self._slot_dbs: dict[int, Any] = {}
        self._txn: lmdb.Transaction | None = None
        self._txn_new_slots: list[int] = []
        self._dirty: dict[int, SegmentedLog] = {}
        self._logs: dict[str, SegmentedLog] = {}
        self._published_txn = 0
        self._publish = threading.Condition()
        self._closed = False
        self._failure: BaseException | None = None  # why the pending write txn can no longer be committed
        # Every handle is opened here, in a write txn: py-lmdb keeps handles opened in a committed write txn
        # only, and opening one later from a reader thread could block on the writer lock.
        with _lmdb_errors(self._data_file), env.begin(write=True) as txn:
            self._meta = env.open_db(txn=txn)  # LMDB's main database
            ids = txn.get(fmt.IDS_KEY, db=self._meta)
            self._next_log_id: int
            self._next_slot: int
            self._next_log_id, self._next_slot = fmt.IDS.unpack(ids) if ids else (1, 0)
            used: set[int] = set()
            cursor = txn.cursor(db=self._meta)
            if cursor.set_range(fmt.SEGMENTS):
                for key, value in cursor.iternext():
                    if not key.startswith(fmt.SEGMENTS):
                        break
                    used.add(fmt.SegmentRecord.unpack(value).slot)
            for slot in range(self._next_slot):
                self._slot_dbs[slot] = env.open_db(fmt.slot_name(slot), txn=txn, create=False)
        with _lmdb_errors(self._data_file):
            self._published_txn = env.info()["last_txnid"]
        self._free_slots = sorted(set(range(self._next_slot)) - used, reverse=True)
        self._committed_ids = (self._next_log_id, self._next_slot, list(self._free_slots))

    # ------------------------------------------------------------------------------------------- lifecycle

    @classmethod
    def open(cls, path: str | os.PathLike[str], config: StorageConfig | None = None) -> LogStore:
        """Open (creating if needed) the store in data directory ``path``."""
        config = (config or StorageConfig()).validate()
        root = Path(path)
        env_dir = root / fmt.ENV_DIRNAME
        data_file = env_dir / "data.mdb"
        try:
            env_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {env_dir}: {exc}") from exc
        if data_file.exists() and config.verify_on_open:
            problems = verify_structure(data_file)
            if problems:
                raise CorruptionError(f"LMDB structure is damaged: {problems[0]}", path=str(data_file))
        with _lmdb_errors(data_file):
            env = lmdb.open(
                str(env_dir),
                map_size=config.map_size_bytes,
                max_dbs=config.max_segments,
                max_readers=1024,
                max_spare_txns=4,
                meminit=False,
            )
        try:
            _check_file_length(env, data_file)
            with _lmdb_errors(data_file), env.begin(write=True) as txn:
                meta = env.open_db(txn=txn)
                version = txn.get(fmt.VERSION_KEY, db=meta)
                if version is None:
                    txn.put(fmt.VERSION_KEY, fmt.U32.pack(fmt.STORE_FORMAT_VERSION), db=meta)
                elif fmt.U32.unpack(version)[0] != fmt.STORE_FORMAT_VERSION:
                    raise StorageError(f"{data_file}: unsupported store format {fmt.U32.unpack(version)[0]}")
            store = cls(root, env, config)
            store._clear_orphan_slots()
        except BaseException:
            env.close()
            raise
        log.info("log store opened", path=str(root), logs=len(store.logs()))
        return store

    def close(self) -> None:
        """Sync what is pending, then close every log and the environment."""
        if self._closed:
            return
        try:
            self.sync()
        finally:
            self._closed = True
            for segmented in self._logs.values():
                segmented._closed = True
            self._env.close()

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log store {self.path} is closed")

    # ------------------------------------------------------------------------------------------------ logs

    def log(
        self,
        topic: str,
        partition: int,
        *,
        create: bool = True,
        segment_bytes: int | None = None,
        segment_ms: int | None = None,
    ) -> SegmentedLog:
        """The log of ``topic``/``partition``; created (empty, starting at index 1) if missing and ``create``.

        ``segment_bytes`` and ``segment_ms`` override the store's for a log being created, and are kept with
        it: they cannot change later, so every replica cuts its segments at the same entries.
        """
        self._check_open()
        name = _name_of(topic, partition)
        existing = self._logs.get(name)
        if existing is not None:
            return existing
        with self._read_txn() as txn, _lmdb_errors(self._data_file):
            raw = txn.get(fmt.log_name_key(name), db=self._meta)
        if raw is None:
            if not create:
                raise InvalidArgumentError(f"no log named {name}")
            segmented = self._create_log(name)
            if segment_bytes is not None or segment_ms is not None:
                segmented._set_limits(segment_bytes or self.config.segment_bytes, segment_ms or self.config.segment_ms)
        else:
            segmented = SegmentedLog(self, name, fmt.U32.unpack(raw)[0])
            segmented._load()
        self._logs[name] = segmented
        return segmented

    def logs(self) -> list[tuple[str, int]]:
        """(topic, partition) of every log in the store (synced or not)."""
        self._check_open()
        names: list[tuple[str, int]] = []
        with self._read_txn() as txn, _lmdb_errors(self._data_file):
            cursor = txn.cursor(db=self._meta)
            if cursor.set_range(fmt.LOG_NAMES):
                for key in cursor.iternext(values=False):
                    if not bytes(key).startswith(fmt.LOG_NAMES):
                        break
                    topic, _, partition = bytes(key[len(fmt.LOG_NAMES) :]).decode().rpartition("/")
                    names.append((topic, int(partition)))
        return names

    def delete_log(self, topic: str, partition: int) -> None:
        """Remove a log and all its data (reclaimed at the next sync)."""
        segmented = self.log(topic, partition, create=False)
        with self._writing() as txn:
            self._dirty[segmented.log_id] = segmented  # so that a rollback restores it
            for record in segmented._segments:
                self._release_slot(record.slot)
            cursor = txn.cursor(db=self._meta)
            for prefix in (b"h", b"c", b"s", b"a"):
                key_prefix = fmt.log_key(prefix, segmented.log_id)
                if cursor.set_range(key_prefix):
                    while bytes(cursor.key()).startswith(key_prefix):
                        if not cursor.delete():
                            break
            txn.delete(fmt.log_name_key(segmented.name), db=self._meta)
        segmented._closed = True
        segmented._deleted = True
        del self._logs[segmented.name]

    def _create_log(self, name: str) -> SegmentedLog:
        with self._writing() as txn:
            log_id = self._next_log_id
            self._next_log_id += 1
            txn.put(fmt.log_name_key(name), fmt.U32.pack(log_id), db=self._meta)
            segmented = SegmentedLog(self, name, log_id)
            segmented._init_empty(base_index=1, base_offset=0, compaction_term=0)
        return segmented

    # ----------------------------------------------------------------------------------------------- sync

    def sync(self) -> None:
        """Make everything appended to any log durable: one LMDB commit, fsynced (group commit)."""
        self._check_open()
        txn = self._txn
        if txn is None:
            return
        if self._failure is not None:
            failure = self._failed_error()
            self.rollback()
            raise failure
        try:
            with _lmdb_errors(self._data_file):
                self._write_ids(txn)
                txn.commit()
        except StorageError:
            self._txn = None
            self._rollback_state()
            raise
        self._txn = None
        self._txn_new_slots = []
        self._committed_ids = (self._next_log_id, self._next_slot, list(self._free_slots))
        with _lmdb_errors(self._data_file):
            committed = self._env.info()["last_txnid"]
        for segmented in self._dirty.values():
            segmented._publish(committed)
        self._dirty.clear()
        with self._publish:
            self._published_txn = committed
            self._publish.notify_all()

    def rollback(self) -> None:
        """Discard everything appended since the last sync, in every log."""
        self._check_open()
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        self._failure = None
        self._rollback_state()

    def _rollback_state(self) -> None:
        for slot in self._txn_new_slots:
            self._slot_dbs.pop(slot, None)  # LMDB closed handles opened in the aborted txn
        self._txn_new_slots = []
        self._next_log_id, self._next_slot, free = self._committed_ids
        self._free_slots = list(free)
        for segmented in self._dirty.values():
            segmented._revert()
            if segmented._deleted:
                segmented._closed = segmented._deleted = False
                self._logs[segmented.name] = segmented
        for name in [name for name, s in self._logs.items() if s._view is None]:
            del self._logs[name]  # created after the last sync
        self._dirty.clear()

    def _write_ids(self, txn: lmdb.Transaction) -> None:
        ids = fmt.IDS.pack(self._next_log_id, self._next_slot)
        if (self._next_log_id, self._next_slot) != self._committed_ids[:2]:
            txn.put(fmt.IDS_KEY, ids, db=self._meta)

    # ------------------------------------------------------------------------------------ transactions

    def _write_txn(self) -> lmdb.Transaction:
        self._check_open()
        if self._failure is not None:
            raise self._failed_error()
        if self._txn is None:
            with _lmdb_errors(self._data_file):
                self._txn = self._env.begin(write=True, buffers=True)
        return self._txn

    @contextmanager
    def _writing(self) -> Iterator[lmdb.Transaction]:
        """The write transaction for one change. If the change fails part-way (an LMDB error, which leaves the
        transaction unusable, or any other error after some of it was written), the transaction is marked
        failed: only rollback() (or a sync(), which rolls back) can discard it."""
        txn = self._write_txn()
        try:
            with _lmdb_errors(self._data_file):
                yield txn
        except BaseException as exc:
            if self._failure is None:
                self._failure = exc
                log.error("a write failed; the unsynced changes must be rolled back", error=repr(exc))
            raise

    def _failed_error(self) -> TransactionFailedError:
        error = TransactionFailedError(
            f"an earlier write to {self.path} failed ({self._failure!r}); rollback() must discard the unsynced "
            "changes before the store can be written or read again"
        )
        error.__cause__ = self._failure
        return error

    @contextmanager
    def _read_txn(self) -> Iterator[lmdb.Transaction]:
        """The owner's read transaction: its pending write txn if any (read-your-writes), else a snapshot."""
        if self._txn is not None:
            if self._failure is not None:
                raise self._failed_error()
            yield self._txn
            return
        with _lmdb_errors(self._data_file):
            txn = self._env.begin(buffers=True)
        try:
            yield txn
        finally:
            txn.abort()

    @contextmanager
    def _reading(self, segmented: SegmentedLog) -> Iterator[tuple[lmdb.Transaction, _View]]:
        """A read snapshot of the synced state of ``segmented`` (any thread), LMDB errors mapped."""
        txn, view = self._snapshot(segmented)
        try:
            with _lmdb_errors(self._data_file):
                yield txn, view
        finally:
            txn.abort()

    def _snapshot(self, segmented: SegmentedLog) -> tuple[lmdb.Transaction, _View]:
        """A read snapshot and the synced view of ``segmented`` that belongs to it (any thread)."""
        for _ in range(_READ_ATTEMPTS):
            self._check_open()
            with _lmdb_errors(self._data_file):
                txn = self._env.begin(buffers=True)
            txn_id = txn.id()
            published = self._published_txn
            # Read the view last: sync() sets views before it advances _published_txn, so any change at or
            # before txn_id that `published` covers is already in this view.
            view = segmented._view
            if view is None:
                txn.abort()
                raise UnavailableError(f"log {segmented.name} has not been synced yet")
            if view.valid_from_txn <= txn_id <= published:
                return txn, view
            txn.abort()
            with self._publish:
                if self._published_txn < txn_id:
                    self._publish.wait(_PUBLISH_WAIT_S)
        raise StorageError(f"could not get a consistent snapshot of {segmented.name}")

    # ---------------------------------------------------------------------------------------------- slots

    def _slot(self, slot: int) -> Any:
        """Handle of a slot's database (opened at store open, or when the slot was made)."""
        try:
            return self._slot_dbs[slot]
        except KeyError:
            raise CorruptionError(f"segment slot {slot} does not exist", path=str(self._data_file)) from None

    def _acquire_slot(self) -> int:
        txn = self._write_txn()
        if self._free_slots:
            return self._free_slots.pop()
        if self._next_slot >= self.config.max_segments:
            raise StorageFullError(f"{self.config.max_segments} segments exist; raise max_segments or segment_bytes")
        slot = self._next_slot
        self._next_slot += 1
        with _lmdb_errors(self._data_file):
            self._slot_dbs[slot] = self._env.open_db(fmt.slot_name(slot), txn=txn, create=True)
        self._txn_new_slots.append(slot)
        return slot

    def _release_slot(self, slot: int) -> None:
        txn = self._write_txn()
        with _lmdb_errors(self._data_file):
            txn.drop(self._slot(slot), delete=False)
        self._free_slots.append(slot)

    def _clear_orphan_slots(self) -> None:
        """Empty free slots that hold data: what an interrupted import left behind."""
        with _lmdb_errors(self._data_file), self._env.begin() as txn:
            orphans = [slot for slot in self._free_slots if txn.stat(self._slot(slot))["entries"]]
        if orphans:
            with _lmdb_errors(self._data_file), self._env.begin(write=True) as txn:
                for slot in orphans:
                    txn.drop(self._slot(slot), delete=False)
            log.warning("emptied orphaned segment slots", slots=orphans, path=str(self.path))

    def _mark_dirty(self, segmented: SegmentedLog) -> lmdb.Transaction:
        txn = self._write_txn()
        self._dirty[segmented.log_id] = segmented
        return txn


def _check_file_length(env: lmdb.Environment, data_file: Path) -> None:
    """Refuse a truncated data file before any page is read: LMDB reads pages through a memory map, and
    touching a page past the end of the file would kill the process with SIGBUS."""
    with _lmdb_errors(data_file):
        last_page_end = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    try:
        size = data_file.stat().st_size
    except OSError as exc:
        raise StorageError(f"cannot read {data_file}: {exc}") from exc
    if size < last_page_end:
        raise CorruptionError(
            f"file is truncated: {size} bytes, but the last committed page ends at byte {last_page_end}",
            path=str(data_file),
        )


def verify_structure(data_file: Path) -> list[str]:
    """Problems found by LMDB's offline structural verifier (empty when the file is sound)."""
    import lmdb.verify

    try:
        return list(lmdb.verify.verify(str(data_file), subdir=False))  # type: ignore[no-untyped-call]
    except lmdb.verify.VerifyError as exc:
        return [str(exc)]
    except OSError as exc:
        return [f"cannot read: {exc}"]


class SegmentedLog:
    """One replica's partition log: Raft entries in segments, with offset and time indexes.

    Get one from :meth:`LogStore.log`. Methods without a note are for the owner thread; methods noted
    *any thread* read only synced data and may run concurrently with the owner.
    """

    def __init__(self, store: LogStore, name: str, log_id: int) -> None:
        self._store = store
        self.name = name
        self.log_id = log_id
        self.topic, _, partition = name.rpartition("/")
        self.partition = int(partition)
        self._segments: list[fmt.SegmentRecord] = []
        self._compaction_index = 0
        self._compaction_term = 0
        self._hard_state = HardState()
        self._last_term = 0
        self._view: _View | None = None
        self._closed = False
        self._deleted = False
        self._segment_bytes = store.config.segment_bytes
        self._segment_ms = store.config.segment_ms

    def __repr__(self) -> str:
        return f"SegmentedLog({self.name!r}, first={self.first_index()}, last={self.last_index()})"

    # ------------------------------------------------------------------------------------- load / publish

    def _init_empty(self, base_index: int, base_offset: int, compaction_term: int) -> None:
        txn = self._store._mark_dirty(self)
        self._compaction_index, self._compaction_term = base_index - 1, compaction_term
        txn.put(
            fmt.log_key(b"c", self.log_id),
            fmt.COMPACTION.pack(self._compaction_index, self._compaction_term),
            db=self._store._meta,
        )
        self._segments = []
        self._new_segment(base_index, base_offset)
        self._last_term = compaction_term

    def _load(self) -> None:
        store = self._store
        with store._read_txn() as txn, _lmdb_errors(store._data_file):
            raw = txn.get(fmt.log_key(b"h", self.log_id), db=store._meta)
            self._hard_state = HardState(*fmt.HARD_STATE.unpack(raw)) if raw else HardState()
            raw = txn.get(fmt.log_key(b"c", self.log_id), db=store._meta)
            if raw is None:
                raise CorruptionError(f"log {self.name} has no compaction record", path=str(store._data_file))
            self._compaction_index, self._compaction_term = fmt.COMPACTION.unpack(raw)
            prefix = fmt.log_key(b"s", self.log_id)
            cursor = txn.cursor(db=store._meta)
            if cursor.set_range(prefix):
                for key, value in cursor.iternext():
                    if key[: len(prefix)] != prefix:
                        break
                    self._segments.append(fmt.SegmentRecord.unpack(value))
            if not self._segments:
                raise CorruptionError(f"log {self.name} has no segments", path=str(store._data_file))
            limits = txn.get(fmt.log_key(b"a", self.log_id) + _LIMITS.encode(), db=store._meta)
            if limits is not None:
                self._segment_bytes, self._segment_ms = fmt.COMPACTION.unpack(limits)
        self._last_term = self._read_last_term()
        self._view = self._make_view(store._published_txn)

    @contextmanager
    def _writing(self, index: int | None = None, *, segments: bool = True) -> Iterator[lmdb.Transaction]:
        """The write transaction for one change of this log. If the change fails, the log's in-memory state is
        put back as it was before it (the transaction itself is marked failed: see LogStore._writing).
        ``segments=False`` for a change that leaves segments and compaction alone (hard state, attributes: once
        per group per round), so there is nothing to save."""
        saved = (
            (list(self._segments), self._compaction_index, self._compaction_term, self._last_term) if segments else None
        )
        hard_state = self._hard_state
        with self._store._writing() as txn:
            self._store._dirty[self.log_id] = self
            try:
                with _lmdb_errors(self._store._data_file, index):
                    yield txn
            except BaseException:
                if saved is not None:
                    self._segments, self._compaction_index, self._compaction_term, self._last_term = saved
                self._hard_state = hard_state
                raise

    def _set_limits(self, segment_bytes: int, segment_ms: int) -> None:
        if segment_bytes < 1024 or segment_ms < 1:
            raise InvalidArgumentError(
                f"segment_bytes must be >= 1024 and segment_ms >= 1, got {segment_bytes}, {segment_ms}"
            )
        self.set_attribute(_LIMITS, fmt.COMPACTION.pack(segment_bytes, segment_ms))
        self._segment_bytes, self._segment_ms = segment_bytes, segment_ms

    @property
    def segment_limits(self) -> tuple[int, int]:
        """(segment_bytes, segment_ms) this log rolls by."""
        return self._segment_bytes, self._segment_ms

    def _read_last_term(self) -> int:
        last = self._segments[-1]
        if last.entry_count == 0:
            if len(self._segments) > 1:
                return self._term_from_disk(self._segments[-2].last_index)
            return self._compaction_term
        return self._term_from_disk(last.last_index)

    def _make_view(self, txn_id: int) -> _View:
        return _View(tuple(self._segments), self._compaction_index, self._compaction_term, txn_id)

    def _publish(self, txn_id: int) -> None:
        if not self._deleted:
            self._view = self._make_view(txn_id)

    def _revert(self) -> None:
        view = self._view
        if view is None:
            self._segments = []
            self._closed = True
            return
        self._segments = list(view.segments)
        self._compaction_index, self._compaction_term = view.compaction_index, view.compaction_term
        with self._store._read_txn() as txn, _lmdb_errors(self._store._data_file):
            raw = txn.get(fmt.log_key(b"h", self.log_id), db=self._store._meta)
        self._hard_state = HardState(*fmt.HARD_STATE.unpack(raw)) if raw else HardState()
        self._last_term = self._read_last_term()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.name} is closed")
        self._store._check_open()

    # ------------------------------------------------------------------------------------------- queries

    def first_index(self) -> int:
        """Index of the first entry still in the log (last_index() + 1 when the log is empty)."""
        self._check_open()
        return self._compaction_index + 1

    def last_index(self) -> int:
        """Index of the last entry, or of the compaction point when the log holds no entries."""
        self._check_open()
        for record in reversed(self._segments):
            if record.entry_count:
                return record.last_index
        return self._compaction_index

    def next_offset(self) -> int:
        """Offset the next record appended will get."""
        self._check_open()
        return self._segments[-1].next_offset

    def start_offset(self) -> int:
        """Offset of the first record still in the log."""
        return self._segments[0].base_offset

    def compaction_point(self) -> tuple[int, int]:
        """(index, term) of the last entry removed by drop_before or a snapshot; (0, 0) if none."""
        self._check_open()
        return self._compaction_index, self._compaction_term

    def segments(self) -> list[SegmentInfo]:
        """Every segment, oldest first; all but the last are sealed."""
        self._check_open()
        last = len(self._segments) - 1
        return [SegmentInfo.of(r, i < last) for i, r in enumerate(self._segments)]

    def size_bytes(self) -> int:
        self._check_open()
        return sum(r.size_bytes for r in self._segments)

    def hard_state(self) -> HardState:
        self._check_open()
        return self._hard_state

    def set_hard_state(self, state: HardState) -> None:
        """Persist Raft's hard state with the next sync."""
        self._check_open()
        if min(state) < 0:
            raise InvalidArgumentError(f"hard state fields must be >= 0: {state}")
        with self._writing(segments=False) as txn:
            txn.put(fmt.log_key(b"h", self.log_id), fmt.HARD_STATE.pack(*state), db=self._store._meta)
        self._hard_state = HardState(*state)

    def attribute(self, name: str) -> bytes | None:
        """A small value the node keeps with the log (applied index, snapshot metadata...)."""
        self._check_open()
        with self._store._read_txn() as txn, _lmdb_errors(self._store._data_file):
            raw = txn.get(fmt.log_key(b"a", self.log_id) + name.encode(), db=self._store._meta)
            return None if raw is None else bytes(raw)

    def set_attribute(self, name: str, value: bytes | None) -> None:
        """Set (or, with None, remove) an attribute; durable with the next sync, atomically with appends."""
        self._check_open()
        if not name or len(name.encode()) > 400:
            raise InvalidArgumentError(f"attribute name must be 1..400 bytes, got {name!r}")
        key = fmt.log_key(b"a", self.log_id) + name.encode()
        with self._writing(segments=False) as txn:
            if value is None:
                txn.delete(key, db=self._store._meta)
            else:
                txn.put(key, value, db=self._store._meta)

    def term(self, index: int) -> int:
        """Term of the entry at ``index`` (the compaction point's term at the compaction index)."""
        self._check_open()
        if index == self._compaction_index:
            return self._compaction_term
        if index < self._compaction_index:
            raise CompactedError(f"index {index} of {self.name} was compacted (first is {self.first_index()})")
        last = self.last_index()
        if index > last:
            raise UnavailableError(f"index {index} is beyond the last index {last} of {self.name}")
        if index == last:
            return self._last_term
        return self._term_from_disk(index)

    def offset_after(self, index: int) -> int:
        """The log's next offset right after the entry at ``index``: where a data entry's batch ends."""
        self._check_open()
        if index == self._compaction_index:
            return self._segments[0].base_offset
        record = self._segment_for_index(index)
        with self._store._read_txn() as txn, _lmdb_errors(self._store._data_file, index):
            value = txn.get(fmt.INDEX_KEY.pack(index), db=self._store._slot(record.slot))
            if value is None or index > record.last_index:
                raise UnavailableError(f"index {index} is not in {self.name}")
            return fmt.next_offset_of(value)

    def _term_from_disk(self, index: int) -> int:
        record = self._segment_for_index(index)
        key = fmt.INDEX_KEY.pack(index)
        with self._store._read_txn() as txn, _lmdb_errors(self._store._data_file, index):
            value = txn.get(key, db=self._store._slot(record.slot))
            if value is None:
                raise CorruptionError(f"entry missing from {self.name}", path=str(self._store._data_file), index=index)
            if not fmt.value_crc_ok(key, value):
                raise CorruptionError(
                    f"entry CRC mismatch in {self.name}", path=str(self._store._data_file), index=index
                )
            term: int = fmt.TERM_ONLY.unpack_from(value)[0]
            return term

    def _segment_for_index(self, index: int) -> fmt.SegmentRecord:
        position = bisect.bisect_right(self._segments, index, key=lambda r: r.base_index) - 1
        if position < 0:
            raise CompactedError(f"index {index} of {self.name} was compacted")
        return self._segments[position]

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries with index in [lo, hi), stopping before ``max_bytes`` of payload (but at least one)."""
        self._check_open()
        if lo < self.first_index():
            raise CompactedError(f"index {lo} of {self.name} was compacted (first is {self.first_index()})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"index {hi - 1} is beyond the last index {self.last_index()} of {self.name}")
        if lo > hi:
            raise InvalidArgumentError(f"lo {lo} > hi {hi}")
        out: list[Entry] = []
        size = 0
        with self._store._read_txn() as txn:
            for key, value in self._iter_values(txn, self._segments, lo, hi):
                payload_size = len(value) - fmt.ENTRY_HEADER_SIZE
                if out and max_bytes is not None and size + payload_size > max_bytes:
                    break
                size += payload_size
                term, kind, timestamp_ms, _, _, _ = fmt.ENTRY_HEADER.unpack_from(value)
                index = fmt.INDEX_KEY.unpack(key)[0]
                out.append(Entry(index, term, EntryKind(kind), timestamp_ms, bytes(value[fmt.ENTRY_HEADER_SIZE :])))
        return out

    def _iter_values(
        self, txn: lmdb.Transaction, segments: Sequence[fmt.SegmentRecord], lo: int, hi: int
    ) -> Iterator[tuple[bytes, Any]]:
        """(key, value) for indexes [lo, hi) across segments, each checked for continuity and CRC."""
        store = self._store
        expected = lo
        start = bisect.bisect_right(segments, lo, key=lambda r: r.base_index) - 1
        try:
            for record in segments[max(start, 0) :]:
                if expected >= hi:
                    return
                if record.entry_count == 0 or record.last_index < expected:
                    continue
                cursor = txn.cursor(db=store._slot(record.slot))
                if not cursor.set_key(fmt.INDEX_KEY.pack(expected)):
                    raise CorruptionError(f"entry missing from {self.name}", path=str(store._data_file), index=expected)
                for raw_key, value in cursor.iternext():
                    key = bytes(raw_key)
                    if expected >= hi or expected > record.last_index:
                        break
                    if fmt.INDEX_KEY.unpack(key)[0] != expected:
                        raise CorruptionError(
                            f"entry missing from {self.name}", path=str(store._data_file), index=expected
                        )
                    if not fmt.value_crc_ok(key, value):
                        raise CorruptionError(
                            f"entry CRC mismatch in {self.name}", path=str(store._data_file), index=expected
                        )
                    yield key, value
                    expected += 1
        except lmdb.Error as exc:
            raise _storage_error(exc, store._data_file, expected) from exc
        if expected < hi:
            raise CorruptionError(f"entry missing from {self.name}", path=str(store._data_file), index=expected)

    # ------------------------------------------------------------------------------------------- append

    def append(self, entries: Sequence[EntryLike]) -> None:
        """Append entries in one transaction; durable after :meth:`sync`.

        The first entry may overwrite a suffix of the log (Raft conflict resolution): entries from its index on
        are replaced. Entries must have consecutive indexes and non-decreasing terms, no lower than the term of
        the entry before them. A data entry's payload must be a record batch; the log writes its base offset.
        Nothing is written if any entry is invalid. If writing fails part-way (the map or disk is full), the
        log answers as before the call and the store must be rolled back (see :class:`TransactionFailedError`).
        """
        self._check_open()
        if not entries:
            return
        first = entries[0].index
        self._validate(entries, first)
        with self._writing(first) as txn:
            if first <= self.last_index():
                self.truncate_suffix(first)
            self._write_entries(txn, entries)
            self._last_term = entries[-1].term

    def _write_entries(self, txn: lmdb.Transaction, entries: Sequence[EntryLike]) -> None:
        store = self._store
        segment_bytes, segment_ms = self._segment_bytes, self._segment_ms
        record = self._segments[-1]
        data_db = store._slot(record.slot)
        (slot, base_index, last_index, base_offset, next_offset, first_ts, max_ts, max_record_ts, size, count) = (
            record.slot,
            record.base_index,
            record.last_index,
            record.base_offset,
            record.next_offset,
            record.first_timestamp_ms,
            record.max_timestamp_ms,
            record.max_record_timestamp_ms,
            record.size_bytes,
            record.entry_count,
        )
        try:
            for entry in entries:
                payload = entry.payload
                timestamp_ms = entry.timestamp_ms
                value_size = fmt.ENTRY_HEADER_SIZE + len(payload)
                if count and (
                    size + value_size > segment_bytes
                    or (timestamp_ms > 0 and first_ts > 0 and timestamp_ms - first_ts >= segment_ms)
                ):
                    self._segments[-1] = fmt.SegmentRecord(
                        slot, base_index, last_index, base_offset, next_offset, first_ts, max_ts, max_record_ts,
                        size, count,
                    )  # fmt: skip
                    self._write_segment_record(txn, self._segments[-1])
                    new = self._new_segment(entry.index, next_offset)
                    slot, base_index, base_offset = new.slot, new.base_index, new.base_offset
                    first_ts = max_ts = max_record_ts = -1
                    size = count = 0
                    data_db = store._slot(slot)
                key = fmt.INDEX_KEY.pack(entry.index)
                if entry.kind == EntryKind.DATA:
                    batch = read_header(payload)
                    base = next_offset
                    next_offset += batch.record_count
                    max_record_ts = max(max_record_ts, batch.max_timestamp)
                    value = fmt.build_value(
                        key, entry.term, entry.kind, timestamp_ms, payload,
                        base_offset=base, next_offset=next_offset, max_record_ts=max_record_ts,
                    )  # fmt: skip
                else:
                    value = fmt.build_value(
                        key, entry.term, entry.kind, timestamp_ms, payload,
                        base_offset=None, next_offset=next_offset, max_record_ts=max_record_ts,
                    )  # fmt: skip
                if not txn.put(key, value, db=data_db, append=True):
                    raise CorruptionError(
                        "segment holds an entry past the log's end", path=str(store._data_file), index=entry.index
                    )
                if timestamp_ms > 0:
                    if first_ts < 0:
                        first_ts = timestamp_ms
                    max_ts = max(max_ts, timestamp_ms)
                size += value_size
                count += 1
                last_index = entry.index
            self._segments[-1] = fmt.SegmentRecord(
                slot, base_index, last_index, base_offset, next_offset, first_ts, max_ts, max_record_ts, size, count
            )
            self._write_segment_record(txn, self._segments[-1])
        except lmdb.Error as exc:
            raise _storage_error(exc, store._data_file, last_index + 1) from exc

    def _validate(self, entries: Sequence[EntryLike], first: int) -> None:
        limit = self._store.config.max_entry_bytes
        if first < self.first_index():
            raise InvalidEntryError(
                f"entry {first} is before the first index {self.first_index()} of {self.name} (compacted)"
            )
        if first > self.last_index() + 1:
            raise InvalidEntryError(
                f"entry {first} would leave a gap after the last index {self.last_index()} of {self.name}"
            )
        previous_term = self.term(first - 1)
        expected = first
        for entry in entries:
            if entry.index != expected:
                raise InvalidEntryError(f"entry indexes must be consecutive: expected {expected}, got {entry.index}")
            if entry.term < previous_term:
                raise InvalidEntryError(
                    f"entry {entry.index} has term {entry.term}, lower than the term {previous_term} before it"
                )
            if entry.kind not in _KINDS:
                raise InvalidEntryError(f"entry {entry.index} has unknown kind {entry.kind!r}")
            if entry.timestamp_ms < 0:
                raise InvalidEntryError(f"entry {entry.index} has a negative timestamp")
            size = fmt.ENTRY_HEADER_SIZE + len(entry.payload)
            if size > limit:
                raise EntryTooLargeError(f"entry {entry.index} is {size} bytes; max_entry_bytes is {limit}")
            if entry.kind == EntryKind.DATA:
                try:
                    batch = read_header(entry.payload)
                except BatchFormatError as exc:
                    raise InvalidEntryError(f"entry {entry.index} is not a record batch: {exc}") from exc
                if batch.length != len(entry.payload):
                    raise InvalidEntryError(
                        f"entry {entry.index}: batch length {batch.length} != payload length {len(entry.payload)}"
                    )
            previous_term = entry.term
            expected += 1

    def _new_segment(self, base_index: int, base_offset: int) -> fmt.SegmentRecord:
        txn = self._store._mark_dirty(self)
        record = fmt.SegmentRecord(
            slot=self._store._acquire_slot(),
            base_index=base_index,
            last_index=base_index - 1,
            base_offset=base_offset,
            next_offset=base_offset,
            first_timestamp_ms=-1,
            max_timestamp_ms=-1,
            max_record_timestamp_ms=-1,
            size_bytes=0,
            entry_count=0,
        )
        self._segments.append(record)
        self._write_segment_record(txn, record)
        return record

    def _write_segment_record(self, txn: lmdb.Transaction, record: fmt.SegmentRecord) -> None:
        txn.put(fmt.segment_key(self.log_id, record.base_index), record.pack(), db=self._store._meta)

    def _remove_segment_record(self, txn: lmdb.Transaction, record: fmt.SegmentRecord) -> None:
        txn.delete(fmt.segment_key(self.log_id, record.base_index), db=self._store._meta)
        self._store._release_slot(record.slot)

    def roll(self) -> None:
        """Seal the active segment now (if it holds entries); the next entry starts a new one."""
        self._check_open()
        active = self._segments[-1]
        if active.entry_count:
            with self._writing(active.last_index + 1):
                self._new_segment(active.last_index + 1, active.next_offset)

    def sync(self) -> None:
        """Make everything appended durable. Syncs the whole store: one fsync covers every log (group commit)."""
        self._check_open()
        self._store.sync()

    # ---------------------------------------------------------------------------------------- truncate

    def truncate_suffix(self, from_index: int) -> None:
        """Remove entries with index >= ``from_index`` (Raft replaces a conflicting suffix)."""
        self._check_open()
        if from_index > self.last_index():
            return
        if from_index <= self._compaction_index:
            raise CompactedError(f"cannot truncate from {from_index}: compacted up to {self._compaction_index}")
        with self._writing(from_index) as txn:
            while len(self._segments) > 1 and self._segments[-1].base_index >= from_index:
                self._remove_segment_record(txn, self._segments.pop())
            record = self._segments[-1]
            if record.base_index >= from_index:  # the only segment is emptied: keep it, empty
                self._remove_segment_record(txn, self._segments.pop())
                self._new_segment(record.base_index, record.base_offset)
            elif record.last_index >= from_index:  # a segment that ends before the cut stays as it is
                self._segments[-1] = self._truncate_segment(txn, record, from_index)
            self._last_term = self._read_last_term()

    def _truncate_segment(self, txn: lmdb.Transaction, record: fmt.SegmentRecord, from_index: int) -> fmt.SegmentRecord:
        data_db = self._store._slot(record.slot)
        cursor = txn.cursor(db=data_db)
        if cursor.set_key(fmt.INDEX_KEY.pack(from_index)):
            while cursor.delete():
                pass
        # Recompute the segment's stats from the headers that remain (truncations are rare, at the tail).
        first_ts = max_ts = max_record_ts = -1
        next_offset = record.base_offset
        size = count = 0
        for raw_key, value in txn.cursor(db=data_db).iternext():
            key = bytes(raw_key)
            if not fmt.value_crc_ok(key, value):
                index = fmt.INDEX_KEY.unpack(key)[0]
                raise CorruptionError(
                    f"entry CRC mismatch in {self.name}", path=str(self._store._data_file), index=index
                )
            header = fmt.EntryHeader._make(fmt.ENTRY_HEADER.unpack_from(value))
            next_offset, max_record_ts = header.next_offset, header.max_record_ts
            if header.timestamp_ms > 0:
                first_ts = header.timestamp_ms if first_ts < 0 else first_ts
                max_ts = max(max_ts, header.timestamp_ms)
            size += len(value)
            count += 1
        truncated = fmt.SegmentRecord(
            record.slot, record.base_index, from_index - 1, record.base_offset, next_offset, first_ts, max_ts,
            max_record_ts, size, count,
        )  # fmt: skip
        self._write_segment_record(txn, truncated)
        return truncated

    # ----------------------------------------------------------------------------------------- retention

    def drop_before(self, index: int) -> list[SegmentInfo]:
        """Remove every sealed segment whose entries are all below ``index``; return what was dropped.

        The active segment is never dropped. The compaction point moves to the last dropped entry, so
        ``term(first_index() - 1)`` stays answerable.
        """
        self._check_open()
        droppable = 0
        while droppable < len(self._segments) - 1 and self._segments[droppable].last_index < index:
            droppable += 1
        if not droppable:
            return []
        dropped = self._segments[:droppable]
        last = dropped[-1]
        compaction_term = self.term(last.last_index) if last.entry_count else self._compaction_term
        with self._writing() as txn:
            for record in dropped:
                self._remove_segment_record(txn, record)
            self._segments = self._segments[droppable:]
            self._set_compaction(txn, self._segments[0].base_index - 1, compaction_term)
        log.info("segments dropped", log=self.name, segments=len(dropped), before_index=index)
        return [SegmentInfo.of(r, True) for r in dropped]

    def _set_compaction(self, txn: lmdb.Transaction, index: int, term: int) -> None:
        self._compaction_index, self._compaction_term = index, term
        txn.put(fmt.log_key(b"c", self.log_id), fmt.COMPACTION.pack(index, term), db=self._store._meta)

    def segments_older_than(self, retention_ms: int, now_ms: int) -> list[SegmentInfo]:
        """The oldest sealed segments whose newest entry timestamp is at least ``retention_ms`` before
        ``now_ms``, as a prefix of the log (retention never leaves a hole). A segment with no timestamped
        entry has no age and qualifies."""
        self._check_open()
        cutoff = now_ms - retention_ms
        prefix: list[SegmentInfo] = []
        for record in self._segments[:-1]:
            if record.max_timestamp_ms > cutoff:
                break
            prefix.append(SegmentInfo.of(record, True))
        return prefix

    def segments_over_size(self, retention_bytes: int) -> list[SegmentInfo]:
        """The oldest sealed segments to drop so that the log's size is at most ``retention_bytes``."""
        self._check_open()
        excess = self.size_bytes() - retention_bytes
        prefix: list[SegmentInfo] = []
        for record in self._segments[:-1]:
            if excess <= 0:
                break
            prefix.append(SegmentInfo.of(record, True))
            excess -= record.size_bytes
        return prefix

    def reset(self, index: int, term: int, next_offset: int) -> None:
        """Replace the whole log by "everything up to ``index`` (of ``term``) is elsewhere": what installing a
        Raft snapshot does. The next entry appended is ``index + 1`` and gets offset ``next_offset``."""
        self._check_open()
        if index < 0 or term < 0 or next_offset < 0:
            raise InvalidArgumentError("index, term and next_offset must be >= 0")
        with self._writing() as txn:
            for record in self._segments:
                self._remove_segment_record(txn, record)
            self._segments = []
            self._init_empty(index + 1, next_offset, term)
            self._set_compaction(txn, index, term)
            self._last_term = term

    # ------------------------------------------------------------------------------ reads for consumers

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Record batches from the one containing ``offset`` on, as stored (*any thread*, synced data only).

        Stops before ``max_bytes`` (but returns at least one batch) and before any batch that reaches
        ``max_offset`` (the high watermark). Raises :class:`CompactedError` below the log start and
        :class:`UnavailableError` beyond its end.
        """
        if max_bytes < 1:
            raise InvalidArgumentError(f"max_bytes must be >= 1, got {max_bytes}")
        with self._store._reading(self) as (txn, view):
            start, end = view.start_offset, view.end_offset
            if offset < start:
                raise CompactedError(f"offset {offset} of {self.name} was deleted (log starts at {start})")
            if offset > end:
                raise UnavailableError(f"offset {offset} is beyond the end {end} of {self.name}")
            limit = end if max_offset is None else min(max_offset, end)
            if offset >= limit:
                return ReadResult(b"", 0, offset, start, end)
            entry_index = self._index_of_offset(txn, view, offset)
            parts: list[memoryview] = []
            total = 0
            next_offset = offset
            last_index = view.segments[-1].last_index
            for _, value in self._iter_values(txn, view.segments, entry_index, last_index + 1):
                if value[_KIND_AT] != EntryKind.DATA:
                    continue
                batch_end = fmt.next_offset_of(value)
                if batch_end > limit:
                    break  # a batch is visible only once all of it is below the limit
                batch = value[fmt.ENTRY_HEADER_SIZE :]
                if parts and total + len(batch) > max_bytes:
                    break
                if not parts and not read_header(batch).base_offset <= offset < batch_end:
                    raise CorruptionError(
                        f"entry does not hold offset {offset}", path=str(self._store._data_file), index=entry_index
                    )
                parts.append(batch)
                total += len(batch)
                next_offset = batch_end
            return ReadResult(b"".join(parts), len(parts), next_offset, start, end)

    def _first_index_where(
        self, txn: lmdb.Transaction, record: fmt.SegmentRecord, reached: Callable[[Any], bool]
    ) -> int | None:
        """Binary search of a segment: the first index whose header satisfies ``reached`` (which must be
        monotonic along the segment), or None. Probes read headers only; callers CRC-check what they serve."""
        db = self._store._slot(record.slot)
        lo, hi = record.base_index, record.last_index + 1
        while lo < hi:
            middle = (lo + hi) // 2
            value = txn.get(fmt.INDEX_KEY.pack(middle), db=db)
            if value is None or len(value) < fmt.ENTRY_HEADER_SIZE:
                raise CorruptionError(f"entry missing from {self.name}", path=str(self._store._data_file), index=middle)
            if reached(value):
                hi = middle
            else:
                lo = middle + 1
        return lo if lo <= record.last_index else None

    def _index_of_offset(self, txn: lmdb.Transaction, view: _View, offset: int) -> int:
        """Index of the data entry whose batch holds ``offset``: the first entry whose next offset is past it."""
        segments = view.segments
        position = max(bisect.bisect_right(segments, offset, key=lambda r: r.base_offset) - 1, 0)
        for record in segments[position:]:
            if record.next_offset <= offset:
                continue  # no record at or after offset here (e.g. a segment of no-ops)
            found = self._first_index_where(txn, record, lambda value: fmt.next_offset_of(value) > offset)
            if found is not None:
                return found
            raise CorruptionError(
                f"segment of {self.name} has no batch for offset {offset}", path=str(self._store._data_file)
            )
        raise UnavailableError(f"offset {offset} is beyond the end of {self.name}")

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Offset of the first record whose timestamp is >= ``timestamp_ms``, or None if there is none
        (*any thread*, synced data only).

        Like Kafka's time index: the first segment whose largest record timestamp reaches the target, then
        the first entry there whose running maximum does, then that batch's timestamp column.
        """
        with self._store._reading(self) as (txn, view):
            for record in view.segments:
                if record.max_record_timestamp_ms < timestamp_ms or record.entry_count == 0:
                    continue
                index = self._first_index_where(txn, record, lambda value: fmt.max_record_ts_of(value) >= timestamp_ms)
                if index is None:
                    continue
                for _, value in self._iter_values(txn, view.segments, index, index + 1):
                    if value[_KIND_AT] == EntryKind.DATA:
                        found = first_offset_at_or_after(value[fmt.ENTRY_HEADER_SIZE :], timestamp_ms)
                        if found is not None:
                            return found
                raise CorruptionError(
                    f"time lookup in {self.name} found no record at or after {timestamp_ms}",
                    path=str(self._store._data_file),
                    index=index,
                )
            return None

    # ------------------------------------------------------------------------------ segment files

    def export_segment(self, base_index: int, path: str | os.PathLike[str]) -> SegmentFileInfo:
        """Write the sealed segment starting at ``base_index`` to ``path`` (*any thread*, synced data).

        The file is written beside ``path`` and renamed into place, so a reader never sees half a file.
        """
        destination = Path(path)
        temporary = destination.with_name(destination.name + ".partial")
        with self._store._reading(self) as (txn, view):
            sealed = view.segments[:-1]
            position = next((i for i, r in enumerate(sealed) if r.base_index == base_index), None)
            if position is None:
                raise SegmentNotFoundError(f"{self.name} has no sealed segment starting at index {base_index}")
            record = sealed[position]
            if position == 0:
                prev_term = view.compaction_term
            else:
                prev_term = self._stored_term(txn, view.segments, base_index - 1)
            values = (value for _, value in self._iter_values(txn, view.segments, base_index, record.last_index + 1))
            try:
                with temporary.open("wb") as out:
                    size, crc = write_segment_file(out, self.name, record, prev_term, values)
                    out.flush()
                    os.fsync(out.fileno())
                temporary.replace(destination)
            except OSError as exc:
                raise SegmentFileError(f"cannot write {destination}: {exc}") from exc
        return SegmentFileInfo(
            destination, self.name, record.base_index, record.last_index, prev_term, record.base_offset,
            record.next_offset, record.first_timestamp_ms, record.max_timestamp_ms, record.max_record_timestamp_ms,
            record.entry_count, record.size_bytes, size, crc,
        )  # fmt: skip

    def _stored_term(self, txn: lmdb.Transaction, segments: Sequence[fmt.SegmentRecord], index: int) -> int:
        for _, value in self._iter_values(txn, segments, index, index + 1):
            term: int = fmt.TERM_ONLY.unpack_from(value)[0]
            return term
        raise CorruptionError(f"entry missing from {self.name}", path=str(self._store._data_file), index=index)

    def import_segment(self, path: str | os.PathLike[str]) -> SegmentInfo:
        """Add a sealed segment exported by another replica; durable with the next sync.

        The segment must continue the log (its first index is last_index() + 1, with matching term and
        offset), or the log must hold no entries, in which case it starts at the segment (what a replica
        that catches up after retention needs). Everything is checked before the segment becomes visible.
        """
        self._check_open()
        info = read_segment_file_info(path)
        last = self.last_index()
        empty = last == self._compaction_index
        if info.base_index <= self._compaction_index or (not empty and info.base_index != last + 1):
            raise SegmentFileError(
                f"segment {info.base_index}..{info.last_index} does not continue {self.name} "
                f"(entries {self.first_index()}..{last})"
            )
        if (not empty or info.base_index == last + 1) and info.prev_term != self.term(info.base_index - 1):
            raise SegmentFileError(f"segment follows term {info.prev_term}, {self.name} has {self.term(last)}")
        if not empty and info.base_offset != self.next_offset():
            raise SegmentFileError(
                f"segment starts at offset {info.base_offset}, {self.name} is at {self.next_offset()}"
            )
        values = iter_segment_file_values(info)
        record = self._append_stored_segment(info.base_index, info.prev_term, info.base_offset, values, str(info.path))
        if record.next_offset != info.next_offset:
            raise CorruptionError(
                f"segment ends at offset {record.next_offset}, header says {info.next_offset}", path=str(info.path)
            )
        log.info("segment imported", log=self.name, base_index=info.base_index, entries=info.entry_count)
        return SegmentInfo.of(record, True)

    def _append_stored_segment(
        self,
        base_index: int,
        prev_term: int,
        base_offset: int,
        values: Iterable[tuple[int, bytes | memoryview]],
        source: str,
    ) -> fmt.SegmentRecord:
        """Add stored values (checked one by one) as a sealed segment after the log's last entry; if the log
        holds no entries it is moved to start at ``base_index``. Shared by import and repair."""
        empty = self.last_index() == self._compaction_index
        rejected: StorageError | None = None
        with self._writing(base_index) as txn:
            slot = self._store._acquire_slot()
            try:
                record, last_term = self._load_values(txn, slot, base_index, prev_term, base_offset, values, source)
            except StorageError as exc:
                # A bad segment: empty its slot again, and the transaction holds nothing of it. (If LMDB failed
                # instead, the transaction is unusable, emptying the slot fails and the store must roll back.)
                self._store._release_slot(slot)
                rejected = exc
            else:
                active = self._segments[-1]
                if active.entry_count == 0:
                    self._remove_segment_record(txn, self._segments.pop())
                if empty:
                    self._set_compaction(txn, base_index - 1, prev_term)
                self._segments.append(record)
                self._write_segment_record(txn, record)
                self._new_segment(record.last_index + 1, record.next_offset)
                self._last_term = last_term
        if rejected is not None:
            raise rejected
        return record

    def _load_values(
        self,
        txn: lmdb.Transaction,
        slot: int,
        base_index: int,
        prev_term: int,
        base_offset: int,
        values: Iterable[tuple[int, bytes | memoryview]],
        data_file: str,
    ) -> tuple[fmt.SegmentRecord, int]:
        data_db = self._store._slot(slot)
        term = prev_term
        next_offset = base_offset
        first_ts = max_ts = max_record_ts = -1
        size = count = 0
        expected = base_index
        with _lmdb_errors(self._store._data_file):
            for index, value in values:
                if index != expected:
                    raise CorruptionError(f"expected entry {expected}", path=data_file, index=index)
                expected += 1
                key = fmt.INDEX_KEY.pack(index)
                if not fmt.value_crc_ok(key, value):
                    raise CorruptionError("entry CRC mismatch in segment file", path=data_file, index=index)
                header = fmt.EntryHeader._make(fmt.ENTRY_HEADER.unpack_from(value))
                timestamp_ms = header.timestamp_ms
                if header.term < term or header.kind not in _KINDS:
                    raise CorruptionError("entry term goes back or kind is unknown", path=data_file, index=index)
                term = header.term
                if header.kind == EntryKind.DATA:
                    try:
                        batch = read_header(value, fmt.ENTRY_HEADER_SIZE)
                    except BatchFormatError as exc:
                        raise CorruptionError(f"bad record batch: {exc}", path=data_file, index=index) from exc
                    if batch.base_offset != next_offset:
                        raise CorruptionError(
                            f"batch offset {batch.base_offset}, expected {next_offset}", path=data_file, index=index
                        )
                    next_offset += batch.record_count
                    max_record_ts = max(max_record_ts, batch.max_timestamp)
                if (header.next_offset, header.max_record_ts) != (next_offset, max_record_ts):
                    raise CorruptionError(
                        "entry header disagrees with the entries before it", path=data_file, index=index
                    )
                if timestamp_ms > 0:
                    first_ts = timestamp_ms if first_ts < 0 else first_ts
                    max_ts = max(max_ts, timestamp_ms)
                size += len(value)
                count += 1
                if not txn.put(key, value, db=data_db, append=True):
                    raise CorruptionError("segment slot is not empty", path=str(self._store._data_file), index=index)
        if not count:
            raise InvalidArgumentError("a stored segment needs at least one entry")
        record = fmt.SegmentRecord(
            slot, base_index, expected - 1, base_offset, next_offset, first_ts, max_ts, max_record_ts, size, count
        )
        return record, term

    def synced_offsets(self) -> tuple[int, int]:
        """(log start offset, log end offset) of the synced log (*any thread*)."""
        self._check_open()
        view = self._view
        if view is None:
            return 0, 0
        return view.start_offset, view.end_offset


_KINDS = frozenset(int(kind) for kind in EntryKind)
_LIMITS = "storage.segment_limits"
_KIND_AT = 8  # byte of the entry header that holds the kind
