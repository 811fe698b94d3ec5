"""Consumer groups for operators: the part of :class:`rpc.client.Admin` behind ``multiraft group ...``.

Describe, list and delete groups (the Groups service: any node answers, forwarding to the group's
coordinator) and move a group's committed offsets from outside any generation (``reset-offsets``, a Spark
query's monitoring commits). The node refuses such a commit while the group has members (UnknownMemberError).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import grpc

from multiraft.errors import InvalidArgumentError, LeaderNotAvailableError, MultiraftError
from rpc.client._cluster import ClusterClient
from rpc.client._records import TopicPartition
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_proto_error, from_rpc_error

__all__ = [
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "GroupListingResult",
    "UnavailablePartition",
    "GroupMemberInfo",
    "INACTIVE_GROUP_STATES",
    "group_description",
]

Response = TypeVar("Response")

INACTIVE_GROUP_STATES = frozenset({"Empty", "Dead"})
"""Group states without members: only then may offsets be moved from outside the group (as in Kafka)."""


@dataclass(frozen=True, slots=True)
class GroupMemberInfo:
    """One member of a group, as its coordinator knows it."""

    member_id: str
    """The id the coordinator gave the member (Kafka's ``member.id``)."""
    group_instance_id: str | None
    """The static member's ``group_instance_id``; None for a dynamic member."""
    client_id: str
    """The ``client_id`` the member joined with."""
    client_host: str
    """Where the member's JoinGroup came from, as the coordinator saw it (e.g. ``ipv4:127.0.0.1:52612``)."""
    session_timeout_ms: int
    """Milliseconds without a heartbeat after which the coordinator drops the member."""
    topics: tuple[str, ...]
    """The topics the member subscribes to."""
    assignment: tuple[TopicPartition, ...]
    """The partitions the current generation gives the member (empty while a rebalance is completing)."""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group's membership: what ``multiraft group describe`` prints."""

    group: str
    state: str
    """``Empty`` (no members; possibly committed offsets), ``PreparingRebalance``, ``CompletingRebalance``,
    ``Stable`` or ``Dead`` (unknown or deleted); "" when ``error`` is set."""
    protocol_type: str
    """``consumer`` for consumer groups."""
    protocol: str
    """The assignor the group runs (range, roundrobin, sticky, cooperative-sticky); "" without members."""
    generation: int
    """The group's generation (each rebalance makes a new one); 0 before the first one forms."""
    leader_id: str
    """The member that computes the assignment; "" without members."""
    coordinator_id: int
    """The node coordinating the group: the leader of its ``__consumer_offsets`` partition (0: unknown)."""
    members: tuple[GroupMemberInfo, ...]
    error: MultiraftError | None = None
    """Why this group could not be described (the other fields are then empty); None when it was."""

    @property
    def active(self) -> bool:
        """Whether the group has members (its offsets cannot be moved from outside)."""
        return bool(self.members) or self.state not in INACTIVE_GROUP_STATES


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A group in ``Admin.list_group_listings()``: every group with committed offsets or members."""

    group: str
    state: str
    """As :attr:`GroupDescription.state`; ``Empty`` for a group that only has committed offsets."""
    protocol_type: str
    """``consumer``, or "" for a group that only has committed offsets."""
    members: int
    """How many members the group has now."""


@dataclass(frozen=True, slots=True)
class UnavailablePartition:
    """A ``__consumer_offsets`` partition that did not answer a listing: its groups are missing from it."""

    topic: str
    partition: int
    error: MultiraftError
    """Why: usually :class:`~multiraft.errors.LeaderNotAvailableError` (no leader elected, or the leader known
    did not answer in time); the message names the partition's replicas."""


@dataclass(frozen=True, slots=True)
class GroupListingResult:
    """``Admin.list_groups_result()``: the groups of the partitions that answered, and those that did not
    (Kafka's ``ListConsumerGroupsResult.valid()`` and ``errors()``)."""

    listings: tuple[GroupListing, ...]
    """By name."""
    unavailable: tuple[UnavailablePartition, ...] = ()
    """Empty when every partition answered (the listing is complete)."""

    @property
    def complete(self) -> bool:
        return not self.unavailable

    def raise_if_partial(self) -> None:
        """LeaderNotAvailableError naming every partition that did not answer, if any did not."""
        if self.unavailable:
            raise LeaderNotAvailableError(
                "the group listing is partial: " + "; ".join(u.error.message for u in self.unavailable),
                topic=self.unavailable[0].topic,
                partition=",".join(str(u.partition) for u in self.unavailable),
            )


class _FinalAnswerError(Exception):
    """Carries a node's final answer out of ``call_any_node``'s retry loop."""

    def __init__(self, error: MultiraftError) -> None:
        super().__init__(error.message)
        self.error = error


def final_on_leaderless(call: Callable[[grpc.Channel, float], Response]) -> Callable[[grpc.Channel, float], Response]:
    """``call``, but a node's LeaderNotAvailableError ends the retries at once (it is raised by
    :func:`unwrap_final`): the node already waited its bound for a leader, and every other node would route
    to the same partition and say the same."""

    def once(channel: grpc.Channel, timeout: float) -> Response:
        try:
            return call(channel, timeout)
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
            if isinstance(error, LeaderNotAvailableError):
                raise _FinalAnswerError(error) from exc
            raise

    return once


def call_any_node_final(client: ClusterClient, call: Callable[[grpc.Channel, float], Response]) -> Response:
    """``client.call_any_node(call)``, except that a partition without a leader fails at once (see
    :func:`final_on_leaderless`)."""
    try:
        return client.call_any_node(final_on_leaderless(call))
    except _FinalAnswerError as answered:
        raise answered.error from None


def _tp(message: pb.TopicPartition) -> TopicPartition:
    return TopicPartition(message.topic, message.partition)


def group_description(message: pb.GroupDescription) -> GroupDescription:
    """The client's value of one DescribeGroups answer."""
    return GroupDescription(
        group=message.group,
        state=message.state,
        protocol_type=message.protocol_type,
        protocol=message.protocol_name,
        generation=message.generation,
        leader_id=message.leader_id,
        coordinator_id=message.coordinator_id,
        members=tuple(
            GroupMemberInfo(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id or None,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                topics=tuple(m.topics),
                assignment=tuple(sorted(_tp(tp) for tp in m.assignment)),
            )
            for m in message.members
        ),
        error=from_proto_error(message.error) if message.HasField("error") else None,
    )


def _group_names(groups: str | Iterable[str]) -> list[str]:
    names = [groups] if isinstance(groups, str) else list(groups)
    for name in names:
        if not name:
            raise InvalidArgumentError("a group name must not be empty", field="groups")
    return list(dict.fromkeys(names))


class GroupAdmin:
    """Consumer-group administration (mixed into :class:`rpc.client.Admin`, which sets ``_client``)."""

    _client: ClusterClient

    def _call_groups(self, call: Callable[[pb_grpc.GroupsStub, float], Response]) -> Response:
        return call_any_node_final(self._client, lambda channel, timeout: call(pb_grpc.GroupsStub(channel), timeout))

    def describe_groups(self, groups: str | Iterable[str]) -> dict[str, GroupDescription]:
        """State, assignor, generation, coordinator and members (with their partitions) of each group, in the
        order asked. A group that is unknown (no members, no offsets) is ``Dead`` with no members, as in Kafka;
        a group that could not be described has ``error`` set."""
        names = _group_names(groups)
        if not names:
            return {}
        request = pb.DescribeGroupsRequest(groups=names)
        response = self._call_groups(lambda stub, timeout: stub.DescribeGroups(request, timeout=timeout))
        described = {d.group: d for d in (group_description(g) for g in response.groups)}
        return {name: described[name] for name in names if name in described}

    def delete_groups(self, groups: str | Iterable[str]) -> dict[str, MultiraftError | None]:
        """Delete empty groups and their committed offsets: per group None (deleted) or why not
        (GroupNotEmptyError while it has members)."""
        names = _group_names(groups)
        if not names:
            return {}
        request = pb.DeleteGroupsRequest(groups=names)
        response = self._call_groups(lambda stub, timeout: stub.DeleteGroups(request, timeout=timeout))
        return {r.group: (from_proto_error(r.error) if r.HasField("error") else None) for r in response.results}

    def list_groups_result(self) -> GroupListingResult:
        """Every group that has committed offsets or members, with its state and member count, by name, from
        the ``__consumer_offsets`` partitions that answered; those that did not (no leader) are named in
        ``unavailable`` rather than failing the whole listing (as ``rpk group list`` does)."""
        response = self._client.call_any(lambda stub, timeout: stub.ListGroups(pb.ListGroupsRequest(), timeout=timeout))
        listed = {
            item.group: GroupListing(item.group, item.state, item.protocol_type, item.members)
            for item in response.listings
        }
        for name in response.groups:  # a node that predates listings names the groups only
            listed.setdefault(name, GroupListing(name, "Unknown", "", 0))
        unavailable = tuple(
            UnavailablePartition(u.topic, u.partition, from_proto_error(u.error)) for u in response.unavailable
        )
        return GroupListingResult(tuple(listed[name] for name in sorted(listed)), unavailable)

    def list_group_listings(self) -> list[GroupListing]:
        """Every group that has committed offsets or members, with its state and member count, by name;
        LeaderNotAvailableError (naming the partitions) when part of the groups could not be listed (see
        :meth:`list_groups_result` for what did answer)."""
        result = self.list_groups_result()
        result.raise_if_partial()
        return list(result.listings)

    def commit_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int]
    ) -> None:
        """Set ``group``'s committed offsets (the next offset to consume per partition) from outside the group,
        as ``multiraft group reset-offsets`` and a Spark query's monitoring commits do.

        Refused with UnknownMemberError while the group has members (they own its offsets then).
        """
        if not group:
            raise InvalidArgumentError("group must not be empty", field="group")
        now_ms = time.time_ns() // 1_000_000
        committed: list[pb.CommittedOffset] = []
        for (topic, partition), offset in offsets.items():
            if offset < 0:
                raise InvalidArgumentError(f"{topic}/{partition}: offset {offset} is negative", field="offsets")
            committed.append(pb.CommittedOffset(topic=topic, partition=partition, offset=offset, commit_time_ms=now_ms))
        if not committed:
            return
        request = pb.CommitOffsetsRequest(group=group, offsets=committed)  # no generation: from outside the group
        self._client.call_any_log(lambda stub, timeout: stub.CommitOffsets(request, timeout=timeout))
