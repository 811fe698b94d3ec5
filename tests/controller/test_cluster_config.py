"""Dynamic cluster-wide configuration: the AlterClusterConfigs command, its encoding, and how topics see it."""

from __future__ import annotations

import zlib

import pytest

from multiraft.controller import (
    AlterClusterConfigs,
    AlterTopicConfigs,
    ClusterState,
    CreateTopic,
    InvalidConfigError,
    decode_command,
    decode_snapshot,
    describe_cluster_configs,
    effective_config,
    encode_command,
    encode_snapshot,
    topic_config_entries,
    topic_defaults,
)

from ._helpers import cluster, run, step

ASSIGNMENT = (((1, 2, 3), 1),)


def test_setting_a_cluster_config_stores_it_normalized_and_describes_it_as_dynamic() -> None:
    state = run(cluster(3), AlterClusterConfigs({"log.retention.ms": " 3600000 "}))
    assert state.cluster_configs == {"log.retention.ms": "3600000"}
    by_name = {e.name: e for e in describe_cluster_configs(state.cluster_configs)}
    assert (by_name["log.retention.ms"].value, by_name["log.retention.ms"].source) == (
        "3600000",
        "DYNAMIC_CLUSTER_CONFIG",
    )
    assert by_name["log.retention.bytes"].source == "DEFAULT_CONFIG"
    assert by_name["log.retention.bytes"].value == by_name["log.retention.bytes"].default == "-1"


def test_resetting_a_cluster_config_puts_it_back_to_the_default() -> None:
    state = run(
        cluster(3), AlterClusterConfigs({"log.retention.ms": "1000"}), AlterClusterConfigs(delete=("log.retention.ms",))
    )
    assert state.cluster_configs == {}
    assert describe_cluster_configs(state.cluster_configs, ["log.retention.ms"])[0].source == "DEFAULT_CONFIG"


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (AlterClusterConfigs({"no.such.key": "1"}), "no.such.key"),
        (AlterClusterConfigs({"log.retention.ms": "soon"}), "log.retention.ms"),
        (AlterClusterConfigs({"log.segment.bytes": "10"}), "log.segment.bytes"),
        (AlterClusterConfigs({"retention.ms": "1000"}), "retention.ms"),  # a topic key, not a cluster one
        (AlterClusterConfigs(delete=("nope",)), "nope"),
        (AlterClusterConfigs({"log.roll.ms": "1000"}, ("log.roll.ms",)), "log.roll.ms"),
    ],
)
def test_a_wrong_change_is_refused_naming_the_key_and_changes_nothing(command: AlterClusterConfigs, field: str) -> None:
    before = run(cluster(3), AlterClusterConfigs({"message.max.bytes": "4096"}))
    after, result = step(before, command)
    assert isinstance(result.error, InvalidConfigError)
    assert result.error.key == field
    assert after.cluster_configs == before.cluster_configs


def test_a_topic_follows_the_cluster_default_unless_it_sets_the_key_itself() -> None:
    state = run(
        cluster(3),
        CreateTopic("plain", {}, ASSIGNMENT),
        CreateTopic("own", {"retention.ms": "5000"}, ASSIGNMENT),
        AlterClusterConfigs({"log.retention.ms": "60000", "message.max.bytes": "2048"}),
    )
    plain = effective_config(state.topics["plain"].configs, state.cluster_configs)
    own = effective_config(state.topics["own"].configs, state.cluster_configs)
    assert (plain.retention_ms, plain.max_message_bytes) == (60000, 2048)
    assert (own.retention_ms, own.max_message_bytes) == (5000, 2048)
    entries = topic_config_entries(state.topics["own"].configs, topic_defaults(state.cluster_configs))
    sources = {entry.name: entry for entry in entries}
    assert (sources["retention.ms"].value, sources["retention.ms"].source) == ("5000", "DYNAMIC_TOPIC_CONFIG")
    assert (sources["max.message.bytes"].value, sources["max.message.bytes"].source) == (
        "2048",
        "DYNAMIC_CLUSTER_CONFIG",
    )
    assert sources["retention.bytes"].source == "DEFAULT_CONFIG"
    # resetting the topic's own value makes it follow the cluster again
    state = run(state, AlterTopicConfigs("own", delete=("retention.ms",)))
    assert effective_config(state.topics["own"].configs, state.cluster_configs).retention_ms == 60000


def test_the_segment_size_default_applies_to_topics_created_afterwards_only() -> None:
    state = run(
        cluster(3), CreateTopic("before", {}, ASSIGNMENT), AlterClusterConfigs({"log.segment.bytes": "1048576"})
    )
    state = run(state, CreateTopic("after", {}, ASSIGNMENT), CreateTopic("own", {"segment.bytes": "4096"}, ASSIGNMENT))
    assert state.topics["before"].configs["segment.bytes"] == "1073741824"
    assert state.topics["after"].configs["segment.bytes"] == "1048576"
    assert state.topics["own"].configs["segment.bytes"] == "4096"


def test_the_command_and_a_snapshot_holding_cluster_configs_round_trip() -> None:
    command = AlterClusterConfigs({"log.retention.ms": "1000"}, ("message.max.bytes",))
    assert decode_command(encode_command(command)) == command
    state = run(cluster(3), AlterClusterConfigs({"log.retention.bytes": "1048576"}))
    assert decode_snapshot(encode_snapshot(state)).cluster_configs == {"log.retention.bytes": "1048576"}


def test_a_snapshot_without_cluster_configs_keeps_the_bytes_older_code_reads() -> None:
    state = cluster(3)
    assert b"cluster_configs" not in zlib.decompress(encode_snapshot(state)[9:])
    assert decode_snapshot(encode_snapshot(state)) == state
    assert ClusterState().cluster_configs == {}
