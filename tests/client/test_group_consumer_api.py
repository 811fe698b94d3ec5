"""The Consumer's group arguments and subscribe() forms, checked before any network call."""

from __future__ import annotations

import re

import pytest

from multiraft import ConfigError, Consumer, InvalidArgumentError
from rpc.client._consumer_group import matching_topics, subscription_of


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("session_timeout_s", 0.0),
        ("heartbeat_interval_s", 60.0),
        ("max_poll_interval_s", 0),
        ("partition_assignment_strategy", "fastest"),
        ("partition_assignment_strategy", []),
        ("partition_assignment_strategy", ["range", "range"]),
        ("group_instance_id", ""),
        ("client_rack", ""),
        ("client_id", "bad\nid"),
    ],
)
def test_a_wrong_group_argument_raises_config_error_naming_it(argument: str, value: object) -> None:
    with pytest.raises(ConfigError) as refused:
        Consumer("127.0.0.1:1", group_id="g", **{argument: value})  # type: ignore[arg-type]
    assert refused.value.field == argument


def test_outside_a_group_the_member_id_is_empty_and_the_generation_minus_one() -> None:
    with Consumer("127.0.0.1:1", group_id="g") as consumer:
        assert (consumer.member_id, consumer.generation) == ("", -1)


def test_rebalance_callbacks_need_a_group() -> None:
    with Consumer("127.0.0.1:1") as consumer, pytest.raises(InvalidArgumentError):
        consumer.subscribe("t", on_assign=lambda c, p: None)


def test_subscribe_takes_a_name_names_or_a_pattern() -> None:
    assert subscription_of("a") == ("a",)
    assert subscription_of(["a", "b"]) == ("a", "b")
    pattern = re.compile(r"orders-\d+")
    assert subscription_of(pattern) is pattern
    with pytest.raises(TypeError):
        subscription_of([])


def test_a_pattern_matches_whole_topic_names_and_never_internal_topics() -> None:
    known = ["orders-1", "orders-22", "orders-x", "xorders-1", "__consumer_offsets"]
    assert matching_topics(re.compile(r"orders-\d+"), known) == ("orders-1", "orders-22")
    assert matching_topics(re.compile(r".*"), known) == ("orders-1", "orders-22", "orders-x", "xorders-1")
