"""A client that lived through node kills and pauses closes cleanly: closing a Producer and a Consumer
ends every stream and task they started, whatever the cluster did (issue 13)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration

_PROGRAM = Path(__file__).with_name("_close_program.py")
_UNCLEAN = ("Task was destroyed but it is pending", "asynchronous generator is already running", "Traceback")


def _wait_for_line(process: subprocess.Popen[str], text: str, timeout_s: float) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        if time.monotonic() > deadline:
            break
        line = process.stdout.readline()
        if text in line:
            return
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"the client program never printed {text!r}")


def test_a_client_that_lived_through_node_kills_and_pauses_closes_every_stream_and_task(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.create_topic("survivor", partitions=3, replication_factor=3)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONASYNCIODEBUG": ""}
    stderr_path = tmp_path / "client.stderr"
    stderr = stderr_path.open("w")  # a file, not a pipe: the client's logs must never block it
    process = subprocess.Popen(
        [sys.executable, str(_PROGRAM), cluster.bootstrap, "survivor"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
        cwd=root,
    )
    paused: int | None = None
    try:
        _wait_for_line(process, "running", timeout_s=60)
        killed = cluster.leader("survivor", 0)
        cluster.kill(killed)
        time.sleep(3.0)
        # With one node dead, a pause of another loses the quorum: every stream breaks or hangs.
        paused = next(node for node in cluster.info.nodes if node != killed)
        os.kill(cluster.info.nodes[paused].pid, signal.SIGSTOP)
        time.sleep(3.0)
        os.kill(cluster.info.nodes[paused].pid, signal.SIGCONT)
        time.sleep(2.0)
        cluster.start(killed)
        time.sleep(2.0)
        # Close while a node is frozen: its streams cannot end politely.
        os.kill(cluster.info.nodes[paused].pid, signal.SIGSTOP)
        time.sleep(1.0)
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=90)
    finally:
        if paused is not None:
            os.kill(cluster.info.nodes[paused].pid, signal.SIGCONT)
        if process.poll() is None:
            process.kill()
            process.wait(10)
        stderr.close()
    err = stderr_path.read_text()
    assert process.returncode == 0, err
    unclean = [line for line in err.splitlines() if any(text in line for text in _UNCLEAN)]
    assert not unclean, f"{len(unclean)} unclean lines at exit, e.g. {unclean[:3]}\n{err[-3000:]}"
