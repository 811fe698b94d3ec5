"""`multiraft bench`: each mode runs small and prints one JSON object with its figures; bad input fails clearly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from multiraft.tools.cli._bench_trace import STAGES
from tests.cli._helpers import invoke, ok, one_error_line, run_cli
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration

_SMALL = ("--message-size", "256", "--json")


def _bench(*args: str) -> dict[str, Any]:
    """Run ``multiraft bench ARGS`` as a subprocess: stdout must be exactly one JSON object."""
    out = ok(run_cli("bench", *args, timeout_s=120))
    assert out.count("\n") <= 1, out
    result = json.loads(out)
    assert isinstance(result, dict)
    return result


def _check_common(result: dict[str, Any], mode: str, records: int, nodes: int = 3, read: int | None = None) -> None:
    assert result["mode"] == mode
    assert result["records"] == (records if read is None else read) and result["failed"] == 0
    assert result["msgs_per_s"] > 0 and result["mb_per_s"] > 0
    assert result["params"]["message_size"] == 256 and result["params"]["count"] == records
    cpu = result["cpu_s"]
    assert cpu["client"] > 0 and len(cpu["client_processes"]) >= 1
    assert set(cpu["servers"]) == {f"node{n}" for n in range(1, nodes + 1)}
    assert all(isinstance(v, float) and v >= 0 for v in cpu["servers"].values())
    assert "fsync" in result["ack_guarantee"]


def test_produce_against_a_throwaway_local_cluster() -> None:
    result = _bench("produce", "--local", "3", "--count", "5000", "--producers", "2", "--compression", "lz4", *_SMALL)
    _check_common(result, "produce", 5000)
    assert len(result["cpu_s"]["client_processes"]) == 2
    assert result["params"]["compression"] == "lz4" and result["params"]["producers"] == 2
    assert result["cluster"]["local_nodes"] == 3
    # The cluster is gone: its node processes were stopped and collected.
    for pid in result["cluster"]["node_pids"].values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_produce_and_consume_against_a_throwaway_secure_cluster() -> None:
    # TLS on every port, SCRAM authentication and ACLs: the clients connect over TLS as the cluster's admin.
    produced = _bench("produce", "--local", "3", "--secure", "--count", "2000", *_SMALL)
    _check_common(produced, "produce", 2000)
    assert produced["params"]["secure"] is True
    consumed = _bench("consume", "--local", "3", "--secure", "--count", "2000", "--partitions", "2", *_SMALL)
    _check_common(consumed, "consume", 2000, read=2001)


def test_consume_latency_and_e2e_against_one_cluster(shared_cluster: Cluster) -> None:
    where = ("--cluster-dir", shared_cluster.info.directory)

    consumed = _bench("consume", *where, "--count", "3000", "--partitions", "3", "--consumers", "2", *_SMALL)
    # It reads the whole topic: the 3,000 records and the one record the producer sent to warm up.
    _check_common(consumed, "consume", 3000, read=3001)
    assert consumed["written_before"]["records"] == 3000

    latency = _bench("latency", *where, "--count", "200", *_SMALL)
    _check_common(latency, "latency", 200)
    assert latency["samples"] == 200
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["p999_ms"] <= latency["max_ms"]

    # With --bootstrap alone the node processes are unknown: their CPU is reported as null.
    e2e = _bench(
        "e2e", "--bootstrap", shared_cluster.bootstrap, "--count", "300", "--rate", "500", "--partitions", "2", *_SMALL
    )
    assert e2e["mode"] == "e2e" and e2e["records"] == 300 and e2e["failed"] == 0
    assert e2e["samples"] == 300 and e2e["unseen"] == 0
    assert 0 < e2e["p50_ms"] <= e2e["p99_ms"] <= e2e["p999_ms"]
    assert e2e["cpu_s"]["client"] > 0
    assert e2e["cpu_s"]["servers"] is None and e2e["cpu_s"]["servers_total"] is None

    # The topics each run created are deleted again.
    topics = ok(run_cli("topic", "list", bootstrap=shared_cluster.bootstrap))
    assert "bench-" not in topics


def test_e2e_with_trace_breaks_each_records_time_down_by_stage_from_send_to_poll(tmp_path: Path) -> None:
    # Every process of a local cluster and of the bench writes its stages; the report joins them per record.
    e2e = _bench("e2e", "--local", "3", "--count", "300", "--rate", "500", "--trace", str(tmp_path), *_SMALL)
    assert e2e["records"] == 300 and e2e["samples"] == 300 and e2e["params"]["trace_dir"] == str(tmp_path)
    assert e2e["trace"]["records"] == 300
    rows = {row["stage"]: row for row in e2e["trace"]["stages"]}
    assert list(rows) == list(STAGES)
    assert all(row["samples"] == 300 for row in rows.values()), rows
    assert rows["polled"]["since_send_p50_ms"] >= rows["leader_received"]["since_send_p50_ms"] > 0
    assert {path.name.split("-")[0] for path in tmp_path.glob("*.trace")} >= {"bench", "node1", "node2", "node3"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("produce", "--local", "3", "--bootstrap", "127.0.0.1:1"), "without --bootstrap"),
        (("produce", "--local", "1", "--replication-factor", "3"), "--replication-factor 3 needs"),
        (("produce", "--secure", "--bootstrap", "127.0.0.1:1"), "give it with --local"),
        (("produce", "--bootstrap", "127.0.0.1:1", "--api", "bulk"), "--api must be"),
        (("e2e", "--bootstrap", "127.0.0.1:1", "--rate", "0"), "--rate must be positive"),
        (("latency",), "no cluster given"),
    ],
)
def test_bad_parameters_fail_with_one_line(args: tuple[str, ...], message: str) -> None:
    result = invoke("bench", *args, bootstrap="")  # in this process: nothing here reaches a cluster
    assert result.exit_code == 1, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr


def test_the_command_line_reports_a_bad_parameter_on_one_line() -> None:
    line = one_error_line(run_cli("bench", "produce", "--bootstrap", "127.0.0.1:1", "--count", "1", "--duration", "1"))
    assert line == "error: give --count or --duration, not both"


def test_an_out_of_range_option_is_a_usage_error() -> None:
    result = invoke("bench", "produce", "--message-size", "1", bootstrap="127.0.0.1:1")
    assert result.exit_code == 2
    assert "--message-size" in result.output
