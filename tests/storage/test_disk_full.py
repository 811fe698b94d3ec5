"""A full disk is a full store, however LMDB reports it: a commit that the filesystem cuts short part-way comes
back from LMDB as EIO (``mdb_txn_commit: Input/output error``, its "short write"), not ENOSPC. Taken for an I/O
failure it stopped the node (docs/reliability.md, finding 5); it is a StorageFullError, after which the last
commit stands and the store commits again once there is room."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from storage import Entry, EntryKind, LogStore, StorageConfig, StorageError, StorageFullError, encode_batch
from storage import _lmdb as boundary

MiB = 1024 * 1024
PAYLOAD = 16 * 1024
CONFIG = StorageConfig(map_size_bytes=64 * MiB, segment_bytes=256 * 1024)


def _entries(first: int, count: int) -> list[Entry]:
    return [
        Entry(i, 1, EntryKind.DATA, 1_000 + i, encode_batch([bytes([i % 251]) * PAYLOAD], timestamps_ms=1_000 + i))
        for i in range(first, first + count)
    ]


def _lmdb_error(code: int) -> lmdb.Error:
    exc = lmdb.Error(f"mdb_txn_commit: {os.strerror(code)}")
    exc.code = code  # type: ignore[misc]  # as lmdb sets it on the errors it raises
    return exc


@contextlib.contextmanager
def _small_filesystem(path: Path, size_bytes: int) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)], capture_output=True, check=False
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a small tmpfs (needs root): {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True, check=False)


def test_an_io_error_while_the_filesystem_is_all_but_full_is_storage_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boundary, "_free_bytes", lambda path: 4096)
    error = boundary.storage_error(_lmdb_error(errno.EIO), Path("/data/log.lmdb/data.mdb"))
    assert isinstance(error, StorageFullError) and "short write" in str(error)


def test_an_io_error_with_room_on_the_filesystem_is_still_a_storage_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boundary, "_free_bytes", lambda path: 10 * boundary.SHORT_WRITE_FREE_BYTES)
    error = boundary.storage_error(_lmdb_error(errno.EIO), Path("/data/log.lmdb/data.mdb"))
    assert type(error) is StorageError, "a failing disk still stops the node"


def test_a_commit_cut_short_by_a_full_filesystem_is_storage_full_and_commits_again_once_freed(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    with _small_filesystem(tmp_path / "disk", 8 * MiB) as disk:
        with LogStore.open(disk / "data", CONFIG) as store:  # closed before the unmount, whatever happens
            log = store.log("t", 0)
            log.append(_entries(1, 8))
            store.sync()
            synced = log.entries(1, 9)
            filler = disk / "filler"
            with filler.open("wb") as file:  # leave less room than the next commit needs, but some
                file.write(b"\0" * (os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - 128 * 1024))

            log.append(_entries(9, 48))  # about 800 KiB: the filesystem takes part of it, then is full
            with pytest.raises(StorageFullError):
                store.sync()
            store.rollback()
            assert log.entries(1, log.last_index() + 1) == synced, "the last commit stands"

            filler.unlink()
            log.append(_entries(9, 48))
            store.sync()
            written = log.entries(1, 57)
            assert written[:8] == synced and [e.index for e in written] == list(range(1, 57))
        with LogStore.open(disk / "data", CONFIG) as again:
            log = again.log("t", 0)
            assert log.entries(1, log.last_index() + 1) == written, "durable, as a restart reads it"
