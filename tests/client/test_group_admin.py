"""The Admin's consumer-group values, from the Groups service's answers (no cluster)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from multiraft import (
    Admin,
    ConnectionFailedError,
    GroupDescription,
    GroupListing,
    GroupMemberInfo,
    GroupNotEmptyError,
    InvalidArgumentError,
    LeaderNotAvailableError,
    MultiraftError,
    TopicPartition,
    UnavailableError,
    UnknownTopicError,
)
from rpc.client._cluster import ClusterClient
from rpc.client._consumer_group_admin import group_description
from rpc.proto import multiraft_pb2 as pb
from rpc.proto.status import to_status


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


class _Channel:
    """A gRPC channel whose unary calls answer from ``answers`` (by method name) and record the requests."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, object]] = []

    def unary_unary(self, method: str, *args: object, **kwargs: object) -> object:
        name = method.rsplit("/", 1)[1]

        def call(request: object, timeout: float | None = None, **_: object) -> object:
            self.requests.append((name, request))
            return self.answers[name]

        return call

    unary_stream = stream_unary = stream_stream = unary_unary


class _Client(ClusterClient):
    """Every call goes to one fake channel."""

    def __init__(self, channel: _Channel) -> None:  # no bootstrap, no connection
        self.fake = channel

    def call_any_node(self, call, *, timeout_s=None, prefer=()):  # type: ignore[no-untyped-def]
        return call(self.fake, 1.0)


def test_describe_groups_asks_once_and_answers_in_the_order_asked() -> None:
    channel = _Channel(
        {
            "DescribeGroups": pb.DescribeGroupsResponse(
                groups=[pb.GroupDescription(group=g, state="Empty") for g in ("b", "a")]
            )
        }
    )
    described = Admin(_Client(channel)).describe_groups(["a", "b", "a"])
    assert list(described) == ["a", "b"]
    assert [(name, list(request.groups)) for name, request in channel.requests] == [("DescribeGroups", ["a", "b"])]  # type: ignore[attr-defined]


def test_delete_groups_maps_each_result_to_none_or_its_error() -> None:
    results = [
        pb.GroupResult(group="gone"),
        pb.GroupResult(group="busy", error=pb.Error(reason="NON_EMPTY_GROUP", message="busy has members")),
    ]
    channel = _Channel({"DeleteGroups": pb.DeleteGroupsResponse(results=results)})
    deleted = Admin(_Client(channel)).delete_groups(["gone", "busy"])
    assert deleted["gone"] is None
    assert isinstance(deleted["busy"], GroupNotEmptyError)


def test_group_listings_come_sorted_and_groups_a_node_only_names_are_kept() -> None:
    response = pb.ListGroupsResponse(
        groups=["a", "b", "old"],
        listings=[
            pb.GroupListing(group="b", state="Stable", protocol_type="consumer", members=2),
            pb.GroupListing(group="a", state="Empty"),
        ],
    )
    listings = Admin(_Client(_Channel({"ListGroups": response}))).list_group_listings()
    assert listings == [
        GroupListing("a", "Empty", "", 0),
        GroupListing("b", "Stable", "consumer", 2),
        GroupListing("old", "Unknown", "", 0),
    ]


def test_commit_group_offsets_commits_outside_any_generation() -> None:
    channel = _Channel({"CommitOffsets": pb.CommitOffsetsResponse()})
    Admin(_Client(channel)).commit_group_offsets("etl", {TopicPartition("t", 1): 5, ("t", 0): 3})
    ((name, request),) = channel.requests
    assert name == "CommitOffsets"
    assert request.group == "etl" and not request.member_id and not request.HasField("generation")  # type: ignore[attr-defined]
    assert sorted((o.topic, o.partition, o.offset) for o in request.offsets) == [("t", 0, 3), ("t", 1, 5)]  # type: ignore[attr-defined]


class _Refusing(grpc.RpcError):
    """A node's answer carrying a multiraft error, as ``rpc.proto.status.to_status`` sends it."""

    def __init__(self, error: MultiraftError) -> None:
        self._status = to_status(error)

    def code(self) -> grpc.StatusCode:
        return self._status.code

    def details(self) -> str:
        return self._status.details

    def trailing_metadata(self) -> Any:  # the stubs type it as _Metadatum; grpc gives (key, value) pairs
        return tuple(self._status.trailing_metadata)


class _RefusingChannel(_Channel):
    def __init__(self, error: MultiraftError, calls: list[str]) -> None:
        super().__init__({})
        self.error, self.calls = error, calls

    def unary_unary(self, method: str, *args: object, **kwargs: object) -> object:
        def call(request: object, timeout: float | None = None, **_: object) -> object:
            self.calls.append(method.rsplit("/", 1)[1])
            raise _Refusing(self.error)

        return call


class _ThreeNodes(ClusterClient):
    """The real retry loop over three nodes, each answering with ``error``."""

    def __init__(self, error: MultiraftError) -> None:
        super().__init__("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", request_timeout_s=1.0)
        self.calls: list[str] = []
        self._error = error

    def channel(self, address: str) -> grpc.Channel:
        return _RefusingChannel(self._error, self.calls)  # type: ignore[return-value]


def test_a_groups_partition_without_a_leader_fails_at_once_rather_than_being_asked_of_every_node() -> None:
    wedged = LeaderNotAvailableError("__consumer_offsets/4 (replicas 2,3): no leader elected", partition=4)
    client = _ThreeNodes(wedged)
    with pytest.raises(LeaderNotAvailableError, match="__consumer_offsets/4"):
        Admin(client).group_offsets("billing")
    assert client.calls == ["FetchOffsets"]
    with pytest.raises(LeaderNotAvailableError):
        Admin(client).delete_groups("billing")
    assert client.calls == ["FetchOffsets", "DeleteGroups"]


def test_a_node_that_cannot_serve_is_still_retried_on_the_others() -> None:
    client = _ThreeNodes(UnavailableError("starting"))
    with pytest.raises(ConnectionFailedError):
        Admin(client).group_offsets("billing")
    assert len(client.calls) > 1


def test_a_partial_listing_keeps_what_answered_and_names_the_partitions_that_did_not() -> None:
    error = pb.Error(reason="LEADER_NOT_AVAILABLE", message="__consumer_offsets/4 (replicas 2,3): no leader elected")
    response = pb.ListGroupsResponse(
        groups=["a"],
        listings=[pb.GroupListing(group="a", state="Empty")],
        unavailable=[pb.UnavailablePartition(topic="__consumer_offsets", partition=4, error=error)],
    )
    admin = Admin(_Client(_Channel({"ListGroups": response})))
    result = admin.list_groups_result()
    assert result.listings == (GroupListing("a", "Empty", "", 0),) and not result.complete
    ((missing),) = result.unavailable
    assert (missing.topic, missing.partition) == ("__consumer_offsets", 4)
    assert isinstance(missing.error, LeaderNotAvailableError)
    with pytest.raises(LeaderNotAvailableError, match="partial: __consumer_offsets/4"):
        admin.list_group_listings()
    with pytest.raises(LeaderNotAvailableError):
        admin.list_groups()
