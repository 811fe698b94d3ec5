"""The environment and its transactions: :class:`LogStore`, every log of a node in one LMDB environment.

It owns the one pending write transaction (committed by :meth:`LogStore.sync`, the group commit), the
read snapshots handed to other threads with the view of a log that matches them, and the segment slots
(LMDB named databases) that logs take and give back. See :mod:`storage.log` for the threading rules.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lmdb

from storage import _format as fmt
from storage._lmdb import check_file_length, lmdb_errors, log, verify_structure
from storage._segmented import SegmentedLog
from storage.config import StorageConfig
from storage.errors import (
    BeyondLogEndError,
    CorruptionError,
    LogClosedError,
    StorageArgumentError,
    StorageError,
    StorageFullError,
    TransactionFailedError,
)

if TYPE_CHECKING:
    from storage._log_core import LogCore, SyncedView

__all__ = ["LogStore", "StoreCapacity", "disk_free_bytes"]

_PUBLISH_WAIT_S = 0.05
_READ_ATTEMPTS = 200


def _name_of(topic: str, partition: int) -> str:
    if not topic or "/" in topic or "\x00" in topic or len(topic.encode()) > 249:
        raise StorageArgumentError(f"invalid topic name {topic!r}")
    if not isinstance(partition, int) or partition < 0:
        raise StorageArgumentError(f"partition must be an int >= 0, got {partition!r}")
    return f"{topic}/{partition}"


@dataclass(frozen=True, slots=True)
class StoreCapacity:
    """What a store can still take: segment slots, LMDB map and disk space (:meth:`LogStore.capacity`)."""

    free_segments: int  # slots a new segment can take (never used, or released by a deleted segment)
    max_segments: int
    map_used_bytes: int  # the map's high-water mark (LMDB reuses freed pages below it, so free space is at least)
    map_size_bytes: int
    disk_free_bytes: int  # free space of the file system that holds the store, for an unprivileged writer

    @property
    def map_free_bytes(self) -> int:
        return max(0, self.map_size_bytes - self.map_used_bytes)


def disk_free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged process may still write on the file system holding ``path``."""
    try:
        stats = os.statvfs(path)
    except OSError as exc:
        raise StorageError(f"cannot read the free space of {path}: {exc}") from exc
    return stats.f_bavail * stats.f_frsize


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
        self._txn_released = False  # the pending txn frees segments (their pages are reusable one commit later)
        self._dirty: dict[int, LogCore] = {}
        self._logs: dict[str, SegmentedLog] = {}
        self._published_txn = 0
        self._publish = threading.Condition()
        self._closed = False
        self._failure: BaseException | None = None  # why the pending write txn can no longer be committed
        # Every handle is opened here, in a write txn: py-lmdb keeps handles opened in a committed write txn
        # only, and opening one later from a reader thread could block on the writer lock.
        with lmdb_errors(self._data_file), env.begin(write=True) as txn:
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
        with lmdb_errors(self._data_file):
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
        with lmdb_errors(data_file):
            env = lmdb.open(
                str(env_dir),
                map_size=config.map_size_bytes,
                max_dbs=config.max_segments,
                max_readers=1024,
                max_spare_txns=4,
                meminit=False,
            )
        try:
            check_file_length(env, data_file)
            with lmdb_errors(data_file), env.begin(write=True) as txn:
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

    # -------------------------------------------------------------------------------------------- capacity

    def capacity(self) -> StoreCapacity:
        """Free segment slots (counting unsynced changes), map headroom and disk space (owner thread)."""
        self._check_open()
        with lmdb_errors(self._data_file):
            used = (self._env.info()["last_pgno"] + 1) * self._env.stat()["psize"]
        return StoreCapacity(
            free_segments=self.config.max_segments - self._next_slot + len(self._free_slots),
            max_segments=self.config.max_segments,
            map_used_bytes=used,
            map_size_bytes=self.config.map_size_bytes,
            disk_free_bytes=disk_free_bytes(self.path),
        )

    @property
    def writes_pending(self) -> bool:
        """Something was written since the last sync (or rollback)."""
        return self._txn is not None

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
        with self._read_txn() as txn, lmdb_errors(self._data_file):
            raw = txn.get(fmt.log_name_key(name), db=self._meta)
        if raw is None:
            if not create:
                raise StorageArgumentError(f"no log named {name}")
            segmented = self._create_log(name)
            if segment_bytes is not None or segment_ms is not None:
                segmented._set_limits(segment_bytes or self.config.segment_bytes, segment_ms or self.config.segment_ms)
        else:
            segmented = SegmentedLog(self, name, fmt.U32.unpack(raw)[0])
            segmented._load()
        self._logs[name] = segmented
        return segmented

    def has_log(self, topic: str, partition: int) -> bool:
        """Whether the log of ``topic``/``partition`` exists (synced or not): one lookup, where testing
        membership in :meth:`logs` reads every name (creating 10,000 logs that way is quadratic)."""
        self._check_open()
        name = _name_of(topic, partition)
        if name in self._logs:
            return True
        with self._read_txn() as txn, lmdb_errors(self._data_file):
            return txn.get(fmt.log_name_key(name), db=self._meta) is not None

    def logs(self) -> list[tuple[str, int]]:
        """(topic, partition) of every log in the store (synced or not)."""
        self._check_open()
        names: list[tuple[str, int]] = []
        with self._read_txn() as txn, lmdb_errors(self._data_file):
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
            with lmdb_errors(self._data_file):
                self._write_ids(txn)
                txn.commit()
        except StorageError:
            self._txn = None
            self._rollback_state()
            raise
        self._txn = None
        self._txn_new_slots = []
        self._committed_ids = (self._next_log_id, self._next_slot, list(self._free_slots))
        with lmdb_errors(self._data_file):
            committed = self._env.info()["last_txnid"]
        for segmented in self._dirty.values():
            segmented._publish(committed)
        self._dirty.clear()
        with self._publish:
            self._published_txn = committed
            self._publish.notify_all()
        if self._txn_released:
            self._txn_released = False
            self._release_pages()

    def hold_transaction(self) -> None:
        """Begin the write transaction now (the next sync() commits it, rollback() drops it): until then the
        owner's reads share it instead of each beginning a read transaction, which LMDB makes cost time in
        proportion to the named databases open, one per segment (opening 10,000 logs with a dozen reads each
        would be quadratic)."""
        self._write_txn()

    def rollback(self) -> None:
        """Discard everything appended since the last sync, in every log."""
        self._check_open()
        if self._txn is not None:
            self._txn.abort()
            self._txn = None
        self._failure = None
        self._rollback_state()

    def _release_pages(self) -> None:
        """Commit once more, so that the pages the last commit freed can be reused by the next write.

        LMDB lets a write reuse the pages freed by commit N only from commit N + 2 on: without this, a full
        map that a deletion just made room in stays full for every write that fails and is retried."""
        try:
            with lmdb_errors(self._data_file), self._env.begin(write=True) as txn:
                txn.put(fmt.VERSION_KEY, fmt.U32.pack(fmt.STORE_FORMAT_VERSION), db=self._meta)
        except StorageFullError as exc:  # nothing else was written; the next commit frees them as well
            log.warning("could not release freed pages at once", error=str(exc))
            return
        with lmdb_errors(self._data_file):
            committed = self._env.info()["last_txnid"]
        with self._publish:  # no log changed: every view stays valid at the new transaction
            self._published_txn = committed
            self._publish.notify_all()

    def _rollback_state(self) -> None:
        self._txn_released = False
        for slot in self._txn_new_slots:
            self._slot_dbs.pop(slot, None)  # LMDB closed handles opened in the aborted txn
        self._txn_new_slots = []
        self._next_log_id, self._next_slot, free = self._committed_ids
        self._free_slots = list(free)
        for segmented in self._dirty.values():
            segmented._revert()
            if segmented._deleted:
                segmented._closed = segmented._deleted = False
                # Only delete_log marks a log deleted, and it holds a SegmentedLog (the concerns see LogCore).
                self._logs[segmented.name] = cast(SegmentedLog, segmented)
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
            with lmdb_errors(self._data_file):
                self._txn = self._env.begin(write=True, buffers=True)
        return self._txn

    @contextmanager
    def _writing(self) -> Iterator[lmdb.Transaction]:
        """The write transaction for one change. If the change fails part-way (an LMDB error, which leaves the
        transaction unusable, or any other error after some of it was written), the transaction is marked
        failed: only rollback() (or a sync(), which rolls back) can discard it."""
        txn = self._write_txn()
        try:
            with lmdb_errors(self._data_file):
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
        with lmdb_errors(self._data_file):
            txn = self._env.begin(buffers=True)
        try:
            yield txn
        finally:
            txn.abort()

    @contextmanager
    def _reading(self, segmented: LogCore) -> Iterator[tuple[lmdb.Transaction, SyncedView]]:
        """A read snapshot of the synced state of ``segmented`` (any thread), LMDB errors mapped."""
        txn, view = self._snapshot(segmented)
        try:
            with lmdb_errors(self._data_file):
                yield txn, view
        finally:
            txn.abort()

    def _snapshot(self, segmented: LogCore) -> tuple[lmdb.Transaction, SyncedView]:
        """A read snapshot and the synced view of ``segmented`` that belongs to it (any thread)."""
        for _ in range(_READ_ATTEMPTS):
            self._check_open()
            with lmdb_errors(self._data_file):
                txn = self._env.begin(buffers=True)
            txn_id = txn.id()
            published = self._published_txn
            # Read the view last: sync() sets views before it advances _published_txn, so any change at or
            # before txn_id that `published` covers is already in this view.
            view = segmented._view
            if view is None:
                txn.abort()
                raise BeyondLogEndError(f"log {segmented.name} has not been synced yet")
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
        with lmdb_errors(self._data_file):
            self._slot_dbs[slot] = self._env.open_db(fmt.slot_name(slot), txn=txn, create=True)
        self._txn_new_slots.append(slot)
        return slot

    def _release_slot(self, slot: int) -> None:
        txn = self._write_txn()
        with lmdb_errors(self._data_file):
            txn.drop(self._slot(slot), delete=False)
        self._free_slots.append(slot)
        self._txn_released = True

    def _clear_orphan_slots(self) -> None:
        """Empty free slots that hold data: what an interrupted import left behind."""
        with lmdb_errors(self._data_file), self._env.begin() as txn:
            orphans = [slot for slot in self._free_slots if txn.stat(self._slot(slot))["entries"]]
        if orphans:
            with lmdb_errors(self._data_file), self._env.begin(write=True) as txn:
                for slot in orphans:
                    txn.drop(self._slot(slot), delete=False)
            log.warning("emptied orphaned segment slots", slots=orphans, path=str(self.path))

    def _mark_dirty(self, segmented: LogCore) -> lmdb.Transaction:
        txn = self._write_txn()
        self._dirty[segmented.log_id] = segmented
        return txn
