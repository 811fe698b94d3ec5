"""`multiraft topic ...`: what an operator types and reads, and the exit status scripts rely on."""

from __future__ import annotations

import json

import pytest

from tests.cli._helpers import invoke, invoked, ok, one_error_line, run_cli
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.integration


def test_topic_lifecycle_create_list_describe_alter_delete(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    created = invoked(
        invoke(
            "topic", "create", "orders", "-p", "3", "-r", "3", "--config", "retention.ms=3600000", bootstrap=bootstrap
        )
    )
    assert created.strip() == "created topic 'orders': 3 partitions, replication factor 3"

    listed = json.loads(invoked(invoke("topic", "list", "--json", bootstrap=bootstrap)))
    orders = next(t for t in listed if t["name"] == "orders")
    assert orders["partitions"] == 3 and orders["replication_factor"] == 3
    assert orders["configs"]["retention.ms"] == "3600000"
    assert "orders" in invoked(invoke("topic", "list", bootstrap=bootstrap))

    described = json.loads(invoked(invoke("topic", "describe", "orders", "--json", bootstrap=bootstrap)))
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for partition in described["partitions"]:
        assert partition["leader"] in partition["replicas"]
        assert sorted(partition["in_sync_replicas"]) == [1, 2, 3]
        assert partition["high_watermark"] == partition["log_start_offset"] == 0
        assert partition["under_replicated"] is False
    table = invoked(invoke("topic", "describe", "orders", bootstrap=bootstrap))
    for heading in ("leader", "replicas", "ISR", "log start", "high watermark", "replica lag", "retention.ms"):
        assert heading in table

    altered = invoked(
        invoke(
            "topic", "alter", "orders", "--set", "max.message.bytes=2000000", "--delete", "retention.ms",
            bootstrap=bootstrap,
        )
    )  # fmt: skip
    assert "altered topic 'orders'" in altered
    configs = json.loads(invoked(invoke("topic", "describe", "orders", "--json", bootstrap=bootstrap)))["configs"]
    assert configs["max.message.bytes"] == "2000000"
    assert "retention.ms" not in configs

    assert (
        invoked(invoke("topic", "delete", "orders", "--yes", bootstrap=bootstrap)).strip() == "deleted topic 'orders'"
    )
    assert "orders" not in [
        t["name"] for t in json.loads(invoked(invoke("topic", "list", "--json", bootstrap=bootstrap)))
    ]


def test_unknown_topic_exits_1_with_one_stderr_line_and_no_traceback(shared_cluster: Cluster) -> None:
    result = run_cli("topic", "describe", "no-such-topic", bootstrap=shared_cluster.bootstrap)
    assert one_error_line(result) == "error: unknown topic 'no-such-topic' (UNKNOWN_TOPIC)"
    assert result.stdout == b""


def test_debug_shows_the_traceback(shared_cluster: Cluster) -> None:
    result = run_cli("--debug", "topic", "describe", "no-such-topic", bootstrap=shared_cluster.bootstrap)
    assert result.returncode == 1
    assert b"Traceback" in result.stderr and b"UnknownTopicError" in result.stderr


def test_creating_an_existing_topic_or_a_bad_config_fails_with_the_reason(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    invoked(invoke("topic", "create", "twice", "-p", "1", bootstrap=bootstrap))
    assert one_error_line(run_cli("topic", "create", "twice", bootstrap=bootstrap)).endswith("(TOPIC_EXISTS)")
    error = one_error_line(run_cli("topic", "create", "badcfg", "--config", "no.such.key=1", bootstrap=bootstrap))
    assert "no.such.key" in error and error.endswith("(INVALID_ARGUMENT)")


def test_delete_asks_first_and_refuses_without_a_terminal(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    invoked(invoke("topic", "create", "keepme", "-p", "1", bootstrap=bootstrap))
    refused = invoke("topic", "delete", "keepme", bootstrap=bootstrap)
    assert refused.exit_code == 1
    assert refused.stderr == "error: not deleting topic 'keepme': pass --yes to confirm (stdin is not a terminal)\n"
    assert "keepme" in invoked(invoke("topic", "list", bootstrap=bootstrap))


def test_without_a_cluster_address_the_error_says_how_to_give_one() -> None:
    error = one_error_line(run_cli("topic", "list"))
    assert "--bootstrap" in error and "MULTIRAFT_BOOTSTRAP" in error and "--cluster-dir" in error


def test_cluster_dir_finds_a_local_cluster_by_its_directory(shared_cluster: Cluster) -> None:
    result = run_cli("topic", "list", "--json", env={"MULTIRAFT_CLUSTER_DIR": shared_cluster.info.directory})
    assert isinstance(json.loads(ok(result)), list)


def test_an_unreachable_cluster_fails_within_the_timeout(shared_cluster: Cluster) -> None:
    error = one_error_line(run_cli("topic", "list", "--timeout", "1", bootstrap="127.0.0.1:1"))
    assert error.startswith("error: ") and error.endswith("(CONNECTION_FAILED)")
