"""The errors hierarchy: one root, stable wire reasons, details for the wire's ErrorInfo."""

from __future__ import annotations

import inspect

import pytest

import multiraft.controller as controller
import multiraft.controller.errors as errors_module
from multiraft.controller import (
    CommandDecodeError,
    ControllerError,
    DuplicateTopicError,
    InvalidConfigError,
    InvalidReplicationFactorError,
    InvalidTopicNameError,
    NodeNotDrainedError,
    NodeNotFoundError,
    NotEnoughNodesError,
    TopicNotFoundError,
    UnsupportedVersionError,
)

ERRORS = [obj for _, obj in inspect.getmembers(errors_module, inspect.isclass) if issubclass(obj, Exception)]


def test_every_error_derives_from_controller_error_and_is_exported() -> None:
    for error in ERRORS:
        assert issubclass(error, ControllerError)
        assert error.__name__ in errors_module.__all__
        assert error.__name__ in controller.__all__


def test_the_module_docstring_draws_every_error() -> None:
    doc = errors_module.__doc__ or ""
    for error in ERRORS:
        assert error.__name__ in doc


@pytest.mark.parametrize(
    ("error", "reason", "status"),
    [
        (TopicNotFoundError("t"), "UNKNOWN_TOPIC", "NOT_FOUND"),
        (DuplicateTopicError("t"), "TOPIC_EXISTS", "ALREADY_EXISTS"),
        (InvalidTopicNameError("a b", "bad"), "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        (InvalidConfigError("retention.ms", "bad"), "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        (InvalidReplicationFactorError(0, 3), "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        (NodeNotFoundError(7), "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        (NotEnoughNodesError(3, 2), "NOT_ENOUGH_REPLICAS", "UNAVAILABLE"),
        (NodeNotDrainedError(4, 12), "NODE_HAS_REPLICAS", "FAILED_PRECONDITION"),
        (CommandDecodeError("x"), "INTERNAL", "INTERNAL"),
    ],
)
def test_each_error_carries_its_wire_reason_and_status(error: ControllerError, reason: str, status: str) -> None:
    assert error.reason == reason
    assert error.status == status


def test_invalid_argument_errors_name_the_field_in_their_metadata() -> None:
    error = InvalidConfigError("segment.bytes", "cannot be altered after the topic is created")
    assert error.field == error.key == "segment.bytes"
    assert error.metadata == {"field": "segment.bytes"}
    assert "segment.bytes" in str(error)
    assert InvalidTopicNameError("..", "bad").field == "name"
    assert InvalidReplicationFactorError(5, 3).field == "replication_factor"
    assert "5 is more than the 3 node(s)" in str(InvalidReplicationFactorError(5, 3))


def test_invalid_arguments_and_codec_errors_are_value_errors() -> None:
    assert issubclass(InvalidConfigError, ValueError)
    assert issubclass(CommandDecodeError, ValueError)
    assert issubclass(UnsupportedVersionError, CommandDecodeError)


def test_node_has_replicas_says_how_many_and_what_to_do() -> None:
    error = NodeNotDrainedError(4, 12)
    assert error.metadata == {"node_id": "4", "replicas": "12"}
    assert "drain" in str(error)


@pytest.mark.parametrize("error", [e for e in ERRORS if e.reason != "INTERNAL"], ids=lambda e: e.__name__)
def test_every_controller_reason_travels_as_the_shared_error_with_the_same_status(error: type[ControllerError]) -> None:
    from multiraft.errors import error_for_reason

    shared = error_for_reason(error.reason, "message", {})
    assert shared.reason == error.reason, f"multiraft.errors has no class for {error.reason}"
    assert shared.code.name == error.status
