"""Issue 25: adding partitions (`topic add-partitions`), internal topics (`topic list --internal`, `topic
describe __consumer_offsets`) and config sources (`topic describe -c`), against a real 3-node cluster."""

from __future__ import annotations

import json
import time

import pytest

from multiraft import Admin, Consumer, Producer
from multiraft.errors import InvalidArgumentError
from rpc.client._partitioner import partition_for_key
from tests.cli._helpers import invoke, invoked, one_error_line, run_cli
from tests.integration._helpers import Cluster, fetch_all, produce

pytestmark = pytest.mark.integration


def _keys_moving_to(new: set[int], before: int, after: int) -> list[bytes]:
    """Keys that hash to partition 0 of ``before`` partitions and to one of ``new`` of ``after``."""
    keys = [b"key-%d" % i for i in range(200)]
    return [k for k in keys if partition_for_key(k, before) == 0 and partition_for_key(k, after) in new]


def test_added_partitions_get_leaders_take_records_and_producers_see_the_new_count(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    invoked(invoke("topic", "create", "grown", "-p", "1", "-r", "3", bootstrap=bootstrap))
    stale = Producer(bootstrap, linger_ms=1)  # metadata for 5 minutes, unless a send asks for more
    with stale, Producer(bootstrap, linger_ms=1, metadata_max_age_s=0.2) as producer:
        key = _keys_moving_to({1, 2}, 1, 3)[0]
        assert producer.send("grown", b"before", key=key).result(30).partition == 0
        assert stale.send("grown", b"first").result(30).partition == 0

        out = invoked(invoke("topic", "add-partitions", "grown", "-n", "2", bootstrap=bootstrap))
        assert out.strip() == "topic 'grown': 1 -> 3 partitions"
        described = json.loads(invoked(invoke("topic", "describe", "grown", "--json", bootstrap=bootstrap)))
        assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
        for partition in described["partitions"]:
            assert partition["leader"] in partition["replicas"] and len(partition["replicas"]) == 3

        # The producer's metadata ages out and its partitioner hashes over 3 partitions: the key moves.
        deadline = time.monotonic() + 10
        while producer.partition_for("grown", key) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        moved = producer.send("grown", b"after", key=key).result(30)
        assert moved.partition == partition_for_key(key, 3) != 0
        explicit = [producer.send("grown", b"p%d" % p, partition=p).result(30) for p in (1, 2)]
        # A partition past the cached count makes the producer look again rather than fail (as Kafka's).
        assert stale.send("grown", b"stale", partition=2).result(30).partition == 2
    assert [a.partition for a in explicit] == [1, 2]

    with Consumer(bootstrap) as consumer:
        consumer.assign([("grown", 1), ("grown", 2)], start="earliest")
        seen: list[tuple[int, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(seen) < 4 and time.monotonic() < deadline:
            seen += [(r.partition, r.value) for r in consumer.poll(0.5)]
    assert sorted(seen) == sorted([(moved.partition, b"after"), (1, b"p1"), (2, b"p2"), (2, b"stale")])


def test_add_partitions_refuses_fewer_as_many_too_many_and_unknown_topics(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    invoked(invoke("topic", "create", "fixed", "-p", "3", "-r", "1", bootstrap=bootstrap))
    fewer = one_error_line(run_cli("topic", "add-partitions", "fixed", "-p", "2", bootstrap=bootstrap))
    assert "has 3 partitions, more than the requested 2: partitions can be added, never removed" in fewer
    same = one_error_line(run_cli("topic", "add-partitions", "fixed", "--partitions", "3", bootstrap=bootstrap))
    assert "already has 3 partitions" in same
    huge = one_error_line(run_cli("topic", "add-partitions", "fixed", "-p", "1000000", bootstrap=bootstrap))
    assert "partitions must be in [1, " in huge
    unknown = one_error_line(run_cli("topic", "add-partitions", "nope", "-n", "1", bootstrap=bootstrap))
    assert "nope" in unknown
    with Admin(bootstrap) as admin:
        with pytest.raises(InvalidArgumentError, match="more than the requested 1"):
            admin.create_partitions("fixed", 1)
        assert len(admin.describe_topic("fixed").partitions) == 3


def test_internal_topics_are_listed_with_internal_and_described_like_any_topic(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topic("visible", partitions=1, replication_factor=1)
        admin.commit_group_offsets("ops", {("visible", 0): 0})  # creates __consumer_offsets
        assert "__consumer_offsets" not in [t.name for t in admin.list_topics()]
        listed = {t.name: t for t in admin.list_topics(include_internal=True)}
    assert listed["__consumer_offsets"].internal and not listed["visible"].internal

    plain = json.loads(invoked(invoke("topic", "list", "--json", bootstrap=bootstrap)))
    assert "__consumer_offsets" not in [t["name"] for t in plain]
    for flag in ("--internal", "-i"):
        rows = json.loads(invoked(invoke("topic", "list", flag, "--json", bootstrap=bootstrap)))
        assert {t["name"]: t["internal"] for t in rows}["__consumer_offsets"] is True
    assert "__consumer_offsets (internal)" in invoked(invoke("topic", "list", "-i", bootstrap=bootstrap))

    described = json.loads(invoked(invoke("topic", "describe", "__consumer_offsets", "--json", bootstrap=bootstrap)))
    assert described["internal"] is True and described["partitions"]
    assert all(p["leader"] in p["replicas"] and p["in_sync_replicas"] for p in described["partitions"])
    assert "DEFAULT_CONFIG" in invoked(invoke("topic", "describe", "__consumer_offsets", "-c", bootstrap=bootstrap))
    refused = one_error_line(run_cli("topic", "add-partitions", "__consumer_offsets", "-n", "1", bootstrap=bootstrap))
    assert "internal topic" in refused


def test_describe_shows_every_config_with_its_source(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    invoked(invoke("topic", "create", "sourced", "-p", "1", "-r", "1", "-c", "retention.ms=60000", bootstrap=bootstrap))
    with Admin(bootstrap) as admin:
        entries = {e.name: e for e in admin.describe_topic_configs("sourced")}
        assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("60000", "DYNAMIC_TOPIC_CONFIG")
        assert entries["retention.bytes"].source == "DEFAULT_CONFIG" and entries["retention.bytes"].value == "-1"
        assert entries["segment.bytes"].source == "DEFAULT_CONFIG" and entries["segment.bytes"].read_only
        admin.alter_topic_configs("sourced", delete=["retention.ms"])
        reset = {e.name: e for e in admin.describe_topic_configs("sourced")}["retention.ms"]
        assert reset.source == "DEFAULT_CONFIG" and reset.value == str(7 * 24 * 3600 * 1000)
    invoked(invoke("topic", "alter", "sourced", "--set", "max.message.bytes=2000000", bootstrap=bootstrap))
    configs_only = invoked(invoke("topic", "describe", "sourced", "-c", bootstrap=bootstrap))
    assert "max.message.bytes" in configs_only and "DYNAMIC_TOPIC_CONFIG" in configs_only
    assert "high watermark" not in configs_only  # -c alone: no partitions section
    partitions_only = invoked(invoke("topic", "describe", "sourced", "-p", bootstrap=bootstrap))
    assert "high watermark" in partitions_only and "DEFAULT_CONFIG" not in partitions_only


def test_added_partitions_and_their_records_survive_a_restart_of_every_node(shared_cluster: Cluster) -> None:
    """The controller replays CreatePartitions at start (from its log or a snapshot): the partitions come
    back on the same groups, with their records."""
    with Admin(bootstrap := shared_cluster.bootstrap) as admin:
        admin.create_topic("durable", partitions=1, replication_factor=3)
        before = admin.create_partitions("durable", 3)
    produce(shared_cluster.client, "durable", 2, [b"kept"])
    shared_cluster.restart_all()
    with Admin(bootstrap) as admin:
        after = admin.describe_topic("durable")
    assert [(p.partition, p.replicas) for p in after.partitions] == [
        (p.partition, p.replicas) for p in before.partitions
    ]
    assert [value for _, value in fetch_all(shared_cluster.client, "durable", 2)] == [b"kept"]
    for partition in (0, 1, 2):
        assert shared_cluster.leader("durable", partition, timeout_s=30)
