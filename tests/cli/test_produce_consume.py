"""`multiraft produce` and `multiraft consume`: data in from lines, out as text, JSON lines or hex."""

from __future__ import annotations

import base64
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from multiraft import Admin, TopicPartition
from tests.cli._helpers import ROOT, invoke, invoked, ok, one_error_line, run_cli
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration


def _consume_json(bootstrap: str, *args: str) -> list[dict[str, object]]:
    out = invoked(invoke("consume", *args, "--format", "json", bootstrap=bootstrap))
    return [json.loads(line) for line in out.splitlines()]


def test_a_file_with_keys_and_headers_comes_back_as_json(shared_cluster: Cluster, tmp_path: Path) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("people", 3, 3)
    lines = [b"alice:likes tea", b"bob:likes coffee", b"alice:moved to Paris", b"no separator here", b"carol:\xff\xfe"]
    data = tmp_path / "people.txt"
    data.write_bytes(b"\n".join(lines) + b"\n")

    result = run_cli(
        "produce", "people", "--file", str(data), "--key-separator", ":", "--header", "source=cli",
        "--header", "team=ops", "--verbose", bootstrap=bootstrap,
    )  # fmt: skip
    positions = ok(result).splitlines()
    assert len(positions) == len(lines)
    assert all(p.split("/")[0].isdigit() and p.split("/")[1].isdigit() for p in positions)
    assert positions[0].split("/")[0] == positions[2].split("/")[0], "one key, one partition"
    summary = result.stderr.decode().strip()
    assert summary.startswith(f"produced {len(lines)} records") and " in " in summary

    records = _consume_json(bootstrap, "people", "--from", "earliest")
    assert len(records) == len(lines)
    for record in records:
        assert record["topic"] == "people"
        assert record["headers"] == [["source", "cli"], ["team", "ops"]]
        assert isinstance(record["timestamp"], int)
    by_position = {f"{r['partition']}/{r['offset']}": (r["key"], r["value"]) for r in records}
    assert [by_position[p] for p in positions] == [
        ("alice", "likes tea"),
        ("bob", "likes coffee"),
        ("alice", "moved to Paris"),
        (None, "no separator here"),
        ("carol", {"base64": base64.b64encode(b"\xff\xfe").decode()}),
    ]


def test_stdin_text_output_and_partition_max_and_relative_start(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("lines", 2, 3)
    stdin = b"".join(b"line-%d\r\n" % i for i in range(10))
    invoked(invoke("produce", "lines", "--partition", "1", bootstrap=bootstrap, stdin=stdin))

    assert invoked(invoke("consume", "lines", bootstrap=bootstrap)) == "".join(f"line-{i}\n" for i in range(10))
    assert invoked(invoke("consume", "lines", "--partition", "0", bootstrap=bootstrap)) == ""
    shown = invoked(
        invoke("consume", "lines", "-p", "1", "--from", "3", "--max", "2", "--print-offset", bootstrap=bootstrap)
    )
    assert shown == "1/3\tline-3\n1/4\tline-4\n"
    assert invoked(invoke("consume", "lines", "--from", "-2", bootstrap=bootstrap)) == "line-8\nline-9\n"
    assert invoked(invoke("consume", "lines", "--from", "latest", bootstrap=bootstrap)) == ""
    hexed = invoked(invoke("consume", "lines", "--max", "1", "--format", "hex", bootstrap=bootstrap))
    assert hexed == b"line-0".hex() + "\n"


def test_from_timestamp_starts_at_the_first_record_at_or_after_it(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("timeline", 1, 3)
    invoked(invoke("produce", "timeline", bootstrap=bootstrap, stdin=b"before-1\nbefore-2\n"))
    time.sleep(0.01)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.01)
    invoked(invoke("produce", "timeline", bootstrap=bootstrap, stdin=b"after-1\nafter-2\n"))

    assert invoked(invoke("consume", "timeline", "--from", f"@{boundary_ms}", bootstrap=bootstrap)) == (
        "after-1\nafter-2\n"
    )
    iso = datetime.fromtimestamp(boundary_ms / 1000, UTC).isoformat(timespec="milliseconds")
    assert invoked(invoke("consume", "timeline", "--from", iso, bootstrap=bootstrap)) == "after-1\nafter-2\n"
    future = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
    assert invoked(invoke("consume", "timeline", "--from", future, bootstrap=bootstrap)) == ""


def test_group_resumes_where_it_stopped(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("jobs", 2, 3)
    invoked(invoke("produce", "jobs", bootstrap=bootstrap, stdin=b"".join(b"job-%d\n" % i for i in range(12))))

    first = invoked(invoke("consume", "jobs", "--group", "workers", "--max", "5", bootstrap=bootstrap)).splitlines()
    rest = invoked(invoke("consume", "jobs", "--group", "workers", bootstrap=bootstrap)).splitlines()
    assert len(first) == 5
    assert sorted(first + rest) == sorted(f"job-{i}" for i in range(12))
    assert invoked(invoke("consume", "jobs", "--group", "workers", bootstrap=bootstrap)) == ""

    with Admin(bootstrap) as admin:  # committed: the end of every partition that had records
        latest = {TopicPartition("jobs", p): o for p, o in admin.list_offsets("jobs", "latest").items() if o}
        assert admin.group_offsets("workers") == latest
        assert admin.group_lag("workers") == dict.fromkeys(latest, 0)


def test_producing_to_an_unknown_topic_exits_1_with_one_stderr_line(shared_cluster: Cluster) -> None:
    result = run_cli("produce", "no-such-topic", bootstrap=shared_cluster.bootstrap, stdin=b"hello\n")
    assert "unknown topic 'no-such-topic'" in one_error_line(result)
    result = run_cli("consume", "no-such-topic", bootstrap=shared_cluster.bootstrap)
    assert one_error_line(result) == "error: unknown topic 'no-such-topic' (UNKNOWN_TOPIC)"


def test_follow_prints_new_records_and_ctrl_c_exits_130_quietly(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("live", 2, 3)
    environment = {**os.environ, "MULTIRAFT_BOOTSTRAP": bootstrap}
    follower = subprocess.Popen(
        [sys.executable, "-m", "multiraft.tools.cli", "consume", "live", "--follow", "--format", "json"],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        invoked(invoke("produce", "live", bootstrap=bootstrap, stdin=b"one\ntwo\nthree\n"))
        received = _read_lines(follower, count=3, timeout_s=20)
        assert sorted(json.loads(line)["value"] for line in received) == ["one", "three", "two"]
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=20) == 130
        assert follower.stderr is not None and follower.stderr.read().strip() == b""
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(timeout=10)


def _read_lines(process: subprocess.Popen[bytes], count: int, timeout_s: float) -> list[bytes]:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    buffer = b""
    deadline = time.monotonic() + timeout_s
    while buffer.count(b"\n") < count and time.monotonic() < deadline:
        if selector.select(timeout=max(0.0, deadline - time.monotonic())):
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
    lines = buffer.splitlines()
    assert len(lines) >= count, (lines, process.poll())
    return lines[:count]


def test_a_record_the_topic_refuses_fails_produce_with_its_reason(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("small", 1, 3, max_message_bytes="1024")
    stdin = b"fits\n" + b"x" * 4096 + b"\n" + b"never read\n"
    result = run_cli("produce", "small", bootstrap=shared_cluster.bootstrap, stdin=stdin)
    error = one_error_line(result)
    assert error.startswith("error: 1 of 2 records failed; first: ") and "(RECORD_TOO_LARGE)" in error
    assert error.endswith("stopped at the first failure: the input after line 2 was not sent")
    assert invoked(invoke("consume", "small", bootstrap=shared_cluster.bootstrap)) == "fits\n"
