"""Stage timestamps along the data path, for finding where end-to-end latency goes (off by default).

With ``MULTIRAFT_TRACE=<directory>`` in a process's environment (node, client, bench), chosen stages of a
record batch's way from ``send()`` to ``poll()`` append one line each to ``<directory>/<label>-<pid>.trace``::

    <CLOCK_MONOTONIC ns> <stage> <key> [<key> ...]

CLOCK_MONOTONIC is one clock for every process on a machine, so lines from the client and the nodes compare.
Keys let a reader join the lines of one batch: ``c<crc>`` (the batch's CRC, which the leader's offset
assignment does not change), ``g<group>.<index>`` (its Raft entry), ``b<topic>/<partition>@<base>+<count>``
(where it was written). A line holding several keys links them. ``u<topic>/<partition>@<next>`` says
that everything below offset ``next`` reached the stage; ``ug<group>@<next>``, every entry below index
``next``. :mod:`multiraft.tools.cli._bench_trace` reads the files.

Off, a hook costs one module attribute read (``if trace.ON:``); on, a few microseconds per line.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TextIO

__all__ = [
    "ON",
    "ENV",
    "configure",
    "set_label",
    "event",
    "upto",
    "entries_upto",
    "batch_key",
    "entry_key",
    "position_key",
    "close",
]

ENV = "MULTIRAFT_TRACE"

# The hooks read this as ``trace.ON``: one attribute load when tracing is off. configure() rebinds it.
ON = bool(os.environ.get(ENV))


class _Tracer:
    """Where this process writes its lines (one file, opened at the first line, line-buffered)."""

    def __init__(self) -> None:
        self.directory: str | None = os.environ.get(ENV) or None
        self.label = "proc"
        self.file: TextIO | None = None
        self.lock = threading.Lock()

    def write(self, line: str) -> None:
        with self.lock:
            if self.file is None:
                if self.directory is None:
                    return
                Path(self.directory).mkdir(parents=True, exist_ok=True)
                path = Path(self.directory) / f"{self.label}-{os.getpid()}.trace"
                # line-buffered: a node stopped by a signal loses nothing already traced
                self.file = path.open("a", buffering=1, encoding="ascii")
            self.file.write(line)

    def close(self) -> None:
        with self.lock:
            if self.file is not None:
                self.file.close()
                self.file = None


_tracer = _Tracer()


def configure(directory: str | os.PathLike[str] | None, label: str = "proc") -> None:
    """Trace into ``directory`` (None: off) under ``label``; also sets the environment variable, so that
    processes started from here afterwards trace too."""
    _tracer.close()
    _tracer.directory = os.fspath(directory) if directory is not None else None
    _tracer.label = label
    globals()["ON"] = _tracer.directory is not None
    if _tracer.directory is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = _tracer.directory


def set_label(label: str) -> None:
    """Name this process's file (``node3``, ``bench``) before its first line."""
    _tracer.label = label


def event(stage: str, *keys: str) -> None:
    """Record that the batch named by ``keys`` reached ``stage`` now."""
    if ON:
        _tracer.write(f"{time.monotonic_ns()} {stage} {' '.join(keys)}\n")


def upto(stage: str, topic: str, partition: int, next_offset: int) -> None:
    """Record that every offset below ``next_offset`` of the partition reached ``stage`` now."""
    event(stage, f"u{topic}/{partition}@{next_offset}")


def entries_upto(stage: str, group_id: int, index: int) -> None:
    """Record that every Raft entry of the group up to ``index`` reached ``stage`` now."""
    event(stage, f"ug{group_id}@{index + 1}")


def batch_key(batch: bytes | memoryview) -> str:
    """The key of a record batch in its wire and stored form: its CRC (bytes 13-16, see storage.batch)."""
    return f"c{int.from_bytes(batch[13:17], 'little')}"


def entry_key(group_id: int, index: int) -> str:
    return f"g{group_id}.{index}"


def position_key(topic: str, partition: int, base_offset: int, count: int) -> str:
    return f"b{topic}/{partition}@{base_offset}+{count}"


def close() -> None:
    """Close this process's file (the next line opens it again)."""
    _tracer.close()
