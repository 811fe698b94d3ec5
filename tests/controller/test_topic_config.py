"""Topic configs and names: Kafka keys and rules, normalized values, errors that name the key."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.controller import (
    CleanupPolicy,
    InvalidConfigError,
    InvalidTopicNameError,
    TimestampType,
    TopicConfig,
    describe,
    effective_topic_config,
    validate_topic_configs,
    validate_topic_name,
)
from multiraft.controller.topic_config import MAX_LOG_ENTRY_PAYLOAD_BYTES
from storage import ENTRY_OVERHEAD_BYTES, StorageConfig

DAY_MS = 24 * 3600 * 1000


def test_defaults_are_kafkas() -> None:
    config = TopicConfig()
    assert config.retention_ms == 7 * DAY_MS
    assert config.retention_bytes == -1
    assert config.segment_bytes == 1024**3
    assert config.segment_ms == 7 * DAY_MS
    assert config.max_message_bytes == 8 * 1024**2
    assert config.message_timestamp_type is TimestampType.CREATE_TIME
    assert config.cleanup_policy is CleanupPolicy.DELETE


def test_describe_documents_every_key_with_its_default_and_whether_it_may_change() -> None:
    keys = {key.name: key for key in describe()}
    assert set(keys) == {f.metadata["key"] for f in fields(TopicConfig)}
    assert TopicConfig().to_configs() == {name: key.default for name, key in keys.items()}
    assert {name for name, key in keys.items() if not key.alterable} == {"segment.bytes", "segment.ms"}
    for key in keys.values():
        assert key.doc and key.allowed
    for f in fields(TopicConfig):
        assert "unit" in f.metadata and f.metadata["doc"]


def test_values_are_normalized() -> None:
    configs = validate_topic_configs(
        {"retention.ms": " +86400000 ", "max.message.bytes": "0001024", "message.timestamp.type": "LogAppendTime"},
        creating=False,
    )
    assert configs == {
        "max.message.bytes": "1024",
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": "86400000",
    }


def test_creating_pins_the_segment_settings_at_their_defaults() -> None:
    configs = validate_topic_configs({"retention.ms": "-1"}, creating=True)
    assert configs == {"retention.ms": "-1", "segment.bytes": str(1024**3), "segment.ms": str(7 * DAY_MS)}
    assert validate_topic_configs({"segment.bytes": "2048"}, creating=True)["segment.bytes"] == "2048"


@pytest.mark.parametrize("key", ["segment.bytes", "segment.ms"])
def test_segment_settings_cannot_be_altered_after_creation(key: str) -> None:
    with pytest.raises(InvalidConfigError, match="cannot be altered") as caught:
        validate_topic_configs({key: "4096"}, creating=False)
    assert caught.value.key == key


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "-2"),
        ("retention.ms", "1.5"),
        ("retention.ms", "7d"),
        ("retention.ms", "1_000"),
        ("retention.ms", "٣"),  # a non-ASCII digit Python's int() would take
        ("retention.ms", "9223372036854775808"),
        ("retention.bytes", ""),
        ("segment.bytes", "1023"),
        ("segment.bytes", "-1"),
        ("segment.bytes", str(2**31)),
        ("segment.ms", "0"),
        ("max.message.bytes", "1023"),
        ("max.message.bytes", str(64 * 1024**2)),
        ("max.message.bytes", str(16 * 1024**2)),  # with its 37-byte entry header, above storage's max_entry_bytes
        ("message.timestamp.type", "createtime"),
        ("cleanup.policy", "remove"),
    ],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        validate_topic_configs({key: value}, creating=True)
    assert caught.value.key == key
    assert caught.value.reason == "INVALID_ARGUMENT"


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_compaction_is_refused_with_a_clear_error(policy: str) -> None:
    with pytest.raises(InvalidConfigError, match="compaction is not implemented") as caught:
        validate_topic_configs({"cleanup.policy": policy}, creating=True)
    assert caught.value.key == "cleanup.policy"


def test_an_unknown_key_is_refused_and_the_known_ones_listed() -> None:
    with pytest.raises(InvalidConfigError, match=r"retention\.ms") as caught:
        validate_topic_configs({"retention.hours": "5"}, creating=True)
    assert caught.value.key == "retention.hours"


def test_the_limits_themselves_are_accepted() -> None:
    configs = {
        "retention.ms": "0",
        "retention.bytes": "0",
        "segment.bytes": "1024",
        "segment.ms": "1",
        "max.message.bytes": str(MAX_LOG_ENTRY_PAYLOAD_BYTES),
    }
    assert validate_topic_configs(configs, creating=True) == configs


def test_the_largest_max_message_bytes_is_exactly_what_one_storage_entry_holds() -> None:
    assert MAX_LOG_ENTRY_PAYLOAD_BYTES == StorageConfig().max_entry_bytes - ENTRY_OVERHEAD_BYTES
    with pytest.raises(InvalidConfigError, match="max_entry_bytes") as caught:
        validate_topic_configs({"max.message.bytes": str(MAX_LOG_ENTRY_PAYLOAD_BYTES + 1)}, creating=False)
    assert caught.value.key == "max.message.bytes"


def test_a_topic_stored_with_a_larger_max_message_bytes_reads_as_the_largest_storable() -> None:
    config = effective_topic_config({"max.message.bytes": str(64 * 1024**2)})
    assert config.max_message_bytes == MAX_LOG_ENTRY_PAYLOAD_BYTES


def test_the_effective_config_is_typed_and_fills_in_defaults() -> None:
    config = effective_topic_config({"retention.ms": "-1", "message.timestamp.type": "LogAppendTime"})
    assert config == TopicConfig(retention_ms=-1, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert config.validate() is config
    with pytest.raises(InvalidConfigError):
        effective_topic_config({"unknown": "1"})


def test_a_typed_config_with_a_bad_field_fails_validation_naming_the_key() -> None:
    with pytest.raises(InvalidConfigError) as caught:
        TopicConfig(segment_bytes=10).validate()
    assert caught.value.key == "segment.bytes"


@given(st.dictionaries(st.sampled_from([k.name for k in describe()] + ["x"]), st.text(max_size=12), max_size=5))
def test_validation_either_refuses_or_gives_a_fixed_point(configs: dict[str, str]) -> None:
    try:
        normalized = validate_topic_configs(configs, creating=True)
    except InvalidConfigError as exc:
        assert exc.key in configs
        return
    assert validate_topic_configs(normalized, creating=True) == normalized
    assert effective_topic_config(normalized).to_configs().items() >= normalized.items()


@pytest.mark.parametrize("name", ["orders", "a", "Orders.v2_final-3", "x" * 249, "...", "-"])
def test_kafka_topic_names_are_accepted(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "has space", "slash/es", "ünïcode", "tab\t"])
def test_bad_topic_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidTopicNameError) as caught:
        validate_topic_name(name)
    assert caught.value.field == "name"


def test_double_underscore_names_are_for_the_system_only() -> None:
    with pytest.raises(InvalidTopicNameError, match="reserved"):
        validate_topic_name("__consumer_offsets")
    assert validate_topic_name("__consumer_offsets", internal=True) == "__consumer_offsets"
    with pytest.raises(InvalidTopicNameError, match="must start with"):
        validate_topic_name("offsets", internal=True)
