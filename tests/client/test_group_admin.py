"""The Admin's consumer-group values, from the Groups service's answers (no cluster)."""

from __future__ import annotations

import pytest

from multiraft.client import (
    Admin,
    GroupDescription,
    GroupListing,
    GroupMemberInfo,
    InvalidArgumentError,
    TopicPartition,
    UnknownTopicError,
)
from rpc.client._group_admin import group_description
from rpc.proto import multiraft_pb2 as pb


def test_a_described_group_carries_its_members_and_their_sorted_assignments() -> None:
    message = pb.GroupDescription(
        group="billing",
        state="Stable",
        protocol_type="consumer",
        protocol_name="range",
        generation=3,
        leader_id="m-1",
        coordinator_id=2,
        members=[
            pb.GroupMemberDescription(
                member_id="m-1",
                group_instance_id="",
                client_id="app",
                client_host="/127.0.0.1",
                session_timeout_ms=45_000,
                topics=["events"],
                assignment=[pb.TopicPartition(topic="events", partition=p) for p in (2, 0)],
            ),
            pb.GroupMemberDescription(member_id="m-2", group_instance_id="host-b", topics=["events"]),
        ],
    )
    described = group_description(message)
    assert described == GroupDescription(
        group="billing",
        state="Stable",
        protocol_type="consumer",
        protocol="range",
        generation=3,
        leader_id="m-1",
        coordinator_id=2,
        members=(
            GroupMemberInfo(
                "m-1",
                None,
                "app",
                "/127.0.0.1",
                45_000,
                ("events",),
                (TopicPartition("events", 0), TopicPartition("events", 2)),
            ),
            GroupMemberInfo("m-2", "host-b", "", "", 0, ("events",), ()),
        ),
    )
    assert described.error is None and described.active


def test_a_group_that_could_not_be_described_carries_the_error() -> None:
    message = pb.GroupDescription(group="x", error=pb.Error(reason="UNKNOWN_TOPIC", message="gone"))
    described = group_description(message)
    assert isinstance(described.error, UnknownTopicError)
    assert described.members == ()


def test_only_an_empty_or_dead_group_without_members_is_inactive() -> None:
    for state, active in (("Empty", False), ("Dead", False), ("Stable", True), ("PreparingRebalance", True)):
        assert group_description(pb.GroupDescription(group="g", state=state)).active is active


def test_group_values_are_frozen() -> None:
    listing = GroupListing("g", "Empty", "", 0)
    with pytest.raises(AttributeError):
        listing.members = 3  # type: ignore[misc]


def test_empty_group_names_and_negative_offsets_are_refused_before_any_request() -> None:
    with Admin("127.0.0.1:1", request_timeout_s=0.5) as admin:
        with pytest.raises(InvalidArgumentError):
            admin.describe_groups(["ok", ""])
        with pytest.raises(InvalidArgumentError):
            admin.delete_groups("")
        with pytest.raises(InvalidArgumentError):
            admin.commit_group_offsets("", {TopicPartition("t", 0): 1})
        with pytest.raises(InvalidArgumentError, match="negative"):
            admin.commit_group_offsets("g", {TopicPartition("t", 0): -1})
        assert admin.describe_groups([]) == {} and admin.delete_groups([]) == {}
