"""The log engine's boundary with LMDB: lmdb's exceptions mapped to ours, the checks made before LMDB is
given a data file, and the logger every module of the engine shares."""

from __future__ import annotations

import errno
import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lmdb
import structlog

from storage.errors import CorruptionError, StorageError, StorageFullError

__all__ = ["log", "storage_error", "lmdb_errors", "check_file_length", "verify_structure"]

# One logger for the whole engine, still named after the module it was written in (``storage.log``): log
# configurations and tests select it by that name. A stdlib logger underneath: unconfigured, info stays
# silent and warnings go to stderr, never stdout.
log: structlog.stdlib.BoundLogger = structlog.wrap_logger(logging.getLogger("storage.log"))


SHORT_WRITE_FREE_BYTES = 1 << 20
"""An I/O error from LMDB while its filesystem has less room than this is a full disk, not a failing one."""


def storage_error(exc: lmdb.Error, path: Path, index: int | None = None) -> StorageError:
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
    io_error = getattr(exc, "code", None) == errno.EIO or "Input/output error" in str(exc)
    if io_error and _free_bytes(path) < SHORT_WRITE_FREE_BYTES:
        # LMDB reports a write the filesystem cut short (the disk filled part-way) as EIO, not ENOSPC; the
        # commit fails before its meta page, as with ENOSPC, so the last commit stands and a retry may fit.
        return StorageFullError(f"disk full writing {path} (a short write: {exc})")
    where = path if index is None else f"{path} at index {index}"
    return StorageError(f"LMDB error on {where}: {exc}")


def _free_bytes(path: Path) -> int:
    """Room left on the filesystem that holds ``path`` (for an unprivileged writer); large if unknown."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 1 << 62


@contextmanager
def lmdb_errors(path: Path, index: int | None = None) -> Iterator[None]:
    """Map lmdb's exceptions to ours at the boundary."""
    try:
        yield
    except lmdb.Error as exc:
        raise storage_error(exc, path, index) from exc


def check_file_length(env: lmdb.Environment, data_file: Path) -> None:
    """Refuse a truncated data file before any page is read: LMDB reads pages through a memory map, and
    touching a page past the end of the file would kill the process with SIGBUS."""
    with lmdb_errors(data_file):
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
