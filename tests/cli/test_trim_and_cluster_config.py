"""`multiraft topic trim-prefix` and `multiraft cluster config get|set|reset` against a real 3-node cluster."""

from __future__ import annotations

import json
import time

import pytest

from multiraft.errors import RecordTooLargeError
from tests.cli._helpers import invoke, invoked, ok, one_error_line, run_cli
from tests.integration._helpers import Cluster, produce, record_values

pytestmark = pytest.mark.integration


def test_trim_prefix_deletes_records_before_the_offset_and_refuses_one_beyond_the_high_watermark(
    shared_cluster: Cluster,
) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("trim", partitions=2, replication_factor=3)
    for sequence in range(3):
        produce(shared_cluster.client, "trim", 0, record_values(0, sequence, 0, 5))  # offsets 0..14

    trimmed = invoked(invoke("topic", "trim-prefix", "trim", "-o", "7", "-p", "0", "--no-confirm", "--json",
                             bootstrap=bootstrap))  # fmt: skip
    assert json.loads(trimmed) == {"topic": "trim", "partition": 0, "new_start_offset": 7, "error": None}
    described = json.loads(invoked(invoke("topic", "describe", "trim", "--json", bootstrap=bootstrap)))
    assert [p["log_start_offset"] for p in described["partitions"]] == [7, 0]

    beyond = run_cli("topic", "trim-prefix", "trim", "-o", "99", "-p", "0,1", "--no-confirm", bootstrap=bootstrap)
    assert beyond.returncode == 1, beyond.stderr.decode()
    table = beyond.stdout.decode()
    assert "beyond the high watermark 15" in table and "beyond the high watermark 0" in table
    assert "OFFSET_OUT_OF_RANGE" in table

    unconfirmed = run_cli("topic", "trim-prefix", "trim", "-o", "9", bootstrap=bootstrap)
    assert "--no-confirm" in one_error_line(unconfirmed)


def test_a_cluster_config_applies_at_once_to_topics_that_do_not_set_it_and_resets(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("limits", partitions=1, replication_factor=3)
    big = [b"x" * 2000]

    assert ok(run_cli("cluster", "config", "set", "message.max.bytes", "1024", bootstrap=bootstrap)).strip() == (
        "message.max.bytes = 1024"
    )
    assert ok(run_cli("cluster", "config", "get", "message.max.bytes", bootstrap=bootstrap)).strip() == "1024"
    every = json.loads(ok(run_cli("cluster", "config", "get", "--json", bootstrap=bootstrap)))
    assert every["message.max.bytes"] == {"value": "1024", "source": "DYNAMIC_CLUSTER_CONFIG", "default": "8388608"}
    assert every["log.retention.ms"]["source"] == "DEFAULT_CONFIG"

    # The partition's leader applies the controller's state on its own schedule: soon, without a restart.
    deadline = time.monotonic() + 20
    refused = None
    for sequence in range(200):
        try:
            produce(shared_cluster.client, "limits", 0, big)
        except RecordTooLargeError as exc:
            refused = exc
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.1 * (sequence < 50))
    assert refused is not None and "1024" in refused.message

    ok(run_cli("cluster", "config", "reset", "message.max.bytes", bootstrap=bootstrap))
    deadline = time.monotonic() + 20
    for _ in range(200):
        try:
            produce(shared_cluster.client, "limits", 0, big)
            break
        except RecordTooLargeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize(
    ("key", "value"), [("no.such.key", "1"), ("log.retention.ms", "soon"), ("retention.ms", "1000")]
)
def test_a_bad_cluster_config_is_refused_naming_the_key(shared_cluster: Cluster, key: str, value: str) -> None:
    line = one_error_line(run_cli("cluster", "config", "set", key, value, bootstrap=shared_cluster.bootstrap))
    assert key in line and "INVALID_ARGUMENT" in line
    assert "unknown cluster config" in one_error_line(
        run_cli("cluster", "config", "get", "no.such.key", bootstrap=shared_cluster.bootstrap)
    )
