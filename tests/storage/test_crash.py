"""kill -9 at any moment: reopening yields exactly the last synced state (or the one being synced when the
process died), never a torn or half-visible entry."""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from storage import EntryKind, LogStore, decode_batches, read_header
from tests.storage.crash_writer import CONFIG, kind_for, payload_for, state_of

KILLS = 50
DEADLINE_S = 150
ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(directory: Path, seed: int, rng: random.Random) -> list[str]:
    """Start a writer, kill -9 it at a random moment (mostly while it writes, sometimes while it opens)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.crash_writer", str(directory), str(seed)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        if rng.random() < 0.1:
            time.sleep(rng.uniform(0.0, 0.5))
        else:
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and selector.select(timeout=deadline - time.monotonic()):
                    line = process.stdout.readline().decode()
                    lines.append(line.rstrip("\n"))
                    if line.startswith("ready") or not line:
                        break
            time.sleep(rng.uniform(0.0, 0.4))
    finally:
        os.kill(process.pid, signal.SIGKILL)
        output, _ = process.communicate(timeout=30)
    return lines + output.decode().splitlines()


def _expected_states(lines: list[str], previous: str | None) -> set[str]:
    """The last synced state, plus the pending one if the kill came during or right after its sync."""
    synced, pending = previous, None
    for line in lines:
        kind, _, state = line.partition(" ")
        if kind == "synced":
            synced, pending = state, None
        elif kind == "pending":
            pending = state
    return {s for s in (synced, pending) if s is not None}


def _verify(directory: Path) -> str:
    with LogStore.open(directory, CONFIG) as store:
        log = store.log("crash", 0)
        first, last = log.first_index(), log.last_index()
        offset = log.start_offset()
        for entry in log.entries(first, last + 1):  # every CRC is checked on the way
            assert entry.kind == kind_for(entry.index, entry.term)
            expected = payload_for(entry.index, entry.term, entry.kind)
            if entry.kind == EntryKind.DATA:
                assert read_header(entry.payload).base_offset == offset
                assert entry.payload[8:] == expected[8:]
                offset += read_header(entry.payload).record_count
            else:
                assert entry.payload == expected
        assert offset == log.next_offset()
        if log.next_offset() > log.start_offset():
            offsets = decode_batches(log.read(log.start_offset(), 1 << 30).data).column("offset").to_pylist()
            assert offsets == list(range(log.start_offset(), log.next_offset()))
        return state_of(last, log.term(last), log.next_offset(), first)


def test_kill_9_at_random_moments_never_loses_synced_data_or_tears_an_entry(tmp_path: Path) -> None:
    rng = random.Random(2026)
    started = time.monotonic()
    recovered: str | None = None
    kills_after_progress = 0
    for attempt in range(KILLS):
        assert time.monotonic() - started < DEADLINE_S, f"only {attempt} kills in {DEADLINE_S}s"
        lines = _run_and_kill(tmp_path, seed=attempt, rng=rng)
        expected = _expected_states(lines, recovered)
        state = _verify(tmp_path)
        if expected:
            assert state in expected, (attempt, state, expected, lines[-4:])
        kills_after_progress += any(line.startswith("synced") for line in lines)
        recovered = state
    assert kills_after_progress >= KILLS // 2, "the writer rarely got to sync before it was killed"
