"""The CLI fails fast and says what happened (issue 25's defects): refused bootstraps, offsets past the end,
bounded delivery, skipped input, restarting a stopped local cluster, usage errors exit 2, and users and ACLs
on a cluster that enforces neither."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from multiraft.tools.launcher import cluster_down, cluster_up
from tests.cli._helpers import ROOT, invoke, invoked, ok, one_error_line, run_cli
from tests.integration._helpers import FAST, Cluster

pytestmark = pytest.mark.integration


def _usage_error(result: subprocess.CompletedProcess[bytes]) -> str:
    stderr = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, stderr)
    assert "Traceback" not in stderr
    return stderr


# ------------------------------------------------------------------------------------------- no cluster


@pytest.mark.parametrize("address", ["127.0.0.1:1", "localhost:1"])
def test_a_refused_bootstrap_fails_at_once_naming_the_address(address: str) -> None:
    # --timeout 60: before the fix the command waited for it; the subprocess limit (20 s) would fire first.
    error = one_error_line(run_cli("topic", "list", "-b", address, "--timeout", "60", timeout_s=20))
    assert f"no node reachable at {address} (connection refused)" in error


def test_a_bootstrap_without_a_port_is_a_usage_error() -> None:
    stderr = _usage_error(run_cli("topic", "list", "-b", "localhost"))
    assert "must be host:port, got 'localhost'" in stderr


def test_from_minus_zero_is_refused_as_ambiguous() -> None:
    stderr = _usage_error(run_cli("consume", "t", "--from", "-0", "-b", "127.0.0.1:1"))
    assert "-0 is ambiguous: use latest (the end) or 0 (offset 0)" in stderr


def test_an_empty_key_separator_is_refused() -> None:
    stderr = _usage_error(run_cli("produce", "t", "-K", "", "-b", "127.0.0.1:1", stdin=b"a\n"))
    assert "an empty separator" in stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("produce", "t", "--compression", "avro"), "'avro' is not one of 'none', 'zstd', 'lz4'"),
        (("produce", "t", "-p", "-1"), "must be 0 or more, not -1"),
        (("consume", "t", "--max", "x"), "'x' is not an integer"),
    ],
)
def test_invalid_values_are_explained_without_validator_jargon(args: tuple[str, ...], expected: str) -> None:
    stderr = _usage_error(run_cli(*args, "-b", "127.0.0.1:1"))
    assert expected in stderr
    assert "Value error" not in stderr and "Input should be" not in stderr


# --------------------------------------------------------------------------------------- shared cluster


def test_consume_from_an_offset_past_the_end_fails_and_says_where_the_log_ends(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("audit", 1, 3)
    ok(run_cli("produce", "audit", bootstrap=shared_cluster.bootstrap, stdin=b"".join(b"%d\n" % i for i in range(10))))
    error = one_error_line(run_cli("consume", "audit", "--from", "500", bootstrap=shared_cluster.bootstrap))
    assert "offset 500 is past the end of the log: audit/0 ends at 10" in error
    assert "(OFFSET_OUT_OF_RANGE)" in error


def test_follow_from_an_offset_past_the_end_follows_from_the_end(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("audit-follow", 1, 3)
    ok(run_cli("produce", "audit-follow", bootstrap=shared_cluster.bootstrap, stdin=b"old\n"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIRAFT_")}
    env["MULTIRAFT_BOOTSTRAP"] = shared_cluster.bootstrap
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "multiraft.tools.cli",
            "consume",
            "audit-follow",
            "--from",
            "500",
            "--follow",
            "--max",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Records written before the consumer read the end are not its to print: keep writing until it prints one.
        for attempt in range(40):
            if process.poll() is not None:
                break
            ok(run_cli("produce", "audit-follow", bootstrap=shared_cluster.bootstrap, stdin=b"new %d\n" % attempt))
            time.sleep(0.25)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr.decode()
    assert stdout.startswith(b"new "), stdout  # never the replayed "old"
    text = stderr.decode()
    assert re.search(r"note: offset 500 is past the end \(audit-follow/0 ends at \d+\); following from the end", text)
    assert "out of range" not in text and "event=" not in text  # no raw log line


def test_a_record_the_topic_refuses_stops_produce_and_says_the_rest_was_not_sent(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    shared_cluster.create_topic("tiny", 1, 3, max_message_bytes="1024")
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(b"fits\n" + b"x" * 4096 + b"\nthird\nfourth\n")
    error = one_error_line(run_cli("produce", "tiny", "-f", str(mixed), bootstrap=shared_cluster.bootstrap))
    assert error.startswith("error: 1 of 2 records failed; first: ")
    assert error.endswith("stopped at the first failure: the input after line 2 was not sent")
    assert invoked(invoke("consume", "tiny", bootstrap=shared_cluster.bootstrap)) == "fits\n"


def test_user_create_and_acl_add_warn_that_the_cluster_enforces_no_authentication(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    password = tmp_path / "password"
    password.write_text("secret-enough\n")
    created = run_cli("user", "create", "carol", "--password-file", str(password), bootstrap=shared_cluster.bootstrap)
    assert ok(created).strip() == "created user 'carol'"
    assert "warning: this cluster accepted the command without credentials" in created.stderr.decode()
    added = run_cli(
        "acl", "add", "--allow-principal", "User:carol", "--operation", "read", "--topic", "audit",
        bootstrap=shared_cluster.bootstrap,
    )  # fmt: skip
    ok(added)
    assert "ACLs take effect only once the nodes run with `authentication`" in added.stderr.decode()


# ------------------------------------------------------------------------------------- its own clusters


def test_produce_timeout_bounds_delivery_and_says_what_it_waits_for(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    cluster.create_topic("events", 1, 3)
    leader = cluster.leader("events", 0)
    for node_id in [n for n in cluster.info.nodes if n != leader][:2]:
        cluster.kill(node_id)  # no quorum: nothing can be acknowledged
    # --timeout 4: before the fix delivery waited 120 s; the subprocess limit (60 s) would fire first.
    result = run_cli("produce", "events", "-p", "0", "--timeout", "4", bootstrap=cluster.bootstrap, stdin=b"q\n")
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert "waiting for 1 record to be acknowledged by events (each fails after --timeout 4 s)" in stderr
    assert stderr.strip().splitlines()[-1].startswith("error: 1 of 1 record failed; first: ")


def test_cluster_up_on_a_stopped_clusters_directory_says_use_start(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    cluster_up(directory, 1, FAST)
    try:
        cluster_down(directory)
        script = str(ROOT / "scripts" / "cluster")
        refused = subprocess.run(
            [script, "up", "--dir", str(directory)], capture_output=True, timeout=30, check=False, cwd=ROOT
        )
        assert refused.returncode == 1, refused.stderr
        assert b"Traceback" not in refused.stderr
        assert f"{directory} holds a stopped cluster: use `start --dir {directory}`".encode() in refused.stderr
        started = subprocess.run(
            [script, "start", "--dir", str(directory)], capture_output=True, timeout=90, check=False, cwd=ROOT
        )
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.decode().strip()
        assert "no topics" in ok(run_cli("topic", "list", bootstrap=bootstrap))
    finally:
        cluster_down(directory)
