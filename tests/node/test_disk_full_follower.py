"""A follower whose filesystem fills up part-way through a commit keeps running (docs/reliability.md, finding 5).

LMDB reports a commit the filesystem cut short as EIO, not ENOSPC. Taken for an I/O failure it stopped the
scheduler, so the node shut itself down; the nemesis restarts a node only if it has exited when the heal looks,
and a node still shutting down then stayed down for the rest of the run, its replicas behind the others. Now
the round waits and is retried as for any full store. Node 1 hosts one follower group on the real scheduler
thread over a real store on a small tmpfs (root only); the leader is played by the test.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from multiraft.node.scheduler.scheduler import RaftGroup, Scheduler
from storage import LogStore, StorageConfig
from tests.node.test_storage_full import Machine, Outbox, append, follower_group, on_thread, wait_until

MiB = 1 << 20


def test_a_follower_whose_disk_fills_mid_commit_keeps_running_and_catches_up_once_freed(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)]
    mounted = subprocess.run(mount, capture_output=True, check=False)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        _scenario(disk)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, check=False)


def _scenario(disk: Path) -> None:
    config = StorageConfig(map_size_bytes=64 * MiB)
    outbox = Outbox()
    scheduler = Scheduler(store_opener=lambda: LogStore.open(disk / "data", config), tick_ms=3_600_000, outbox=outbox)
    machine = Machine()
    groups: list[RaftGroup] = []

    def load() -> None:
        store = scheduler.store
        assert store is not None
        groups.append(follower_group(store, machine))
        scheduler.add_group(groups[0])

    scheduler.start(load)
    filler = disk / "filler"
    try:
        first = append(2, b"a" * 1024, commit=2)
        on_thread(scheduler, lambda: scheduler.deliver([(1, first)]))
        wait_until(lambda: outbox.acked() == 2, "the first entry")
        room = os.statvfs(disk)
        with filler.open("wb") as file:  # room for part of the next entry only: LMDB's write is cut short
            file.write(b"\0" * (room.f_bavail * room.f_frsize - MiB))

        big = append(3, b"b" * (4 * MiB), commit=3)
        on_thread(scheduler, lambda: scheduler.deliver([(1, big)]))
        wait_until(lambda: scheduler.storage_full != "" or not scheduler.alive, "the write that does not fit")
        assert scheduler.alive, "a full disk does not stop the node"
        assert "short write" in scheduler.storage_full
        time.sleep(1.5)  # a retry or more happens meanwhile; none may stop the node or ack what is not durable
        assert scheduler.alive and outbox.acked() == 2
        assert on_thread(scheduler, groups[0].storage.last_index) == 2

        filler.unlink()
        wait_until(lambda: outbox.acked() == 3, "the waiting entry to be written once there is room")
        assert scheduler.storage_full == ""
        wait_until(lambda: machine.applied[-1:] == [3], "the entry applied")
        assert scheduler.alive
    finally:
        scheduler.stop()
        filler.unlink(missing_ok=True)

    with LogStore.open(disk / "data", config) as reopened:
        assert reopened.log("t", 0, create=False).last_index() == 3, "a restart finds every acknowledged entry"
