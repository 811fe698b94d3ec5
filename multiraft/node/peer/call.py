"""Node-to-node requests whose answer the caller needs, typed: each encodes the request, makes the call and
decodes the answer, so the rooms that ask peers speak the node's vocabulary and never the codec."""

from __future__ import annotations

from collections.abc import Sequence

from multiraft.errors import UnavailableError
from multiraft.node.peer.consumer_group_messages import decode_groups_answer, encode_groups_request
from multiraft.node.peer.messages import (
    STATUS_OK,
    RequestKind,
    decode_capacity,
    decode_controller_outcome,
    decode_error,
    decode_moves,
    decode_offset_rows,
    decode_partition_statuses,
    decode_strings,
    encode_controller_request,
    encode_group_ids,
    encode_offsets_request,
)
from multiraft.node.protocols import PeerCaller
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.consumer_groups import GroupsAnswer, GroupsRequest
from multiraft.node.vocabulary.controller import ControllerOutcome, ControllerRequest
from multiraft.node.vocabulary.offsets import CommittedOffset, OffsetsFetch, OffsetsList, OffsetsRequest
from multiraft.node.vocabulary.status import MoveReport, PartitionStatus

__all__ = [
    "ask_peer",
    "ask_controller",
    "ask_offsets",
    "ask_groups",
    "ask_partition_statuses",
    "ask_moves",
    "ask_capacity",
]

_MIN_TIMEOUT_S = 0.01


async def ask_peer(
    peers: PeerCaller, node: int, kind: RequestKind, body: bytes, timeout_s: float, *, what: str
) -> bytes:
    """The answer's body; UnavailableError if ``node`` (``what``, for messages) cannot be reached, or the
    error it answered with, as the same class."""
    try:
        status, answer = await peers.call(node, kind, body, max(_MIN_TIMEOUT_S, timeout_s))
    except (ConnectionError, TimeoutError) as exc:
        raise UnavailableError(f"{what} {node} unreachable: {exc or type(exc).__name__}") from exc
    if status != STATUS_OK:
        raise decode_error(answer, source=f"{what} {node}")
    return answer


async def ask_controller(
    peers: PeerCaller, leader: int, request: ControllerRequest, timeout_s: float
) -> ControllerOutcome:
    """Run ``request`` on the controller leader ``leader``; raises as :func:`ask_peer`."""
    body = encode_controller_request(request)
    answer = await ask_peer(peers, leader, RequestKind.CONTROLLER, body, timeout_s, what="controller leader")
    return decode_controller_outcome(answer)


async def ask_offsets(
    peers: PeerCaller, leader: int, request: OffsetsRequest, timeout_s: float
) -> list[CommittedOffset] | list[str] | None:
    """Serve ``request`` on the offsets group's leader ``leader``: the offsets of a fetch, the group names of
    a list, None for a commit; raises as :func:`ask_peer`."""
    body = encode_offsets_request(request)
    answer = await ask_peer(peers, leader, RequestKind.OFFSETS, body, timeout_s, what="offsets leader")
    operation = request.operation
    if isinstance(operation, OffsetsFetch):
        rows = decode_offset_rows(answer)
        return [CommittedOffset(r.topic, r.partition, r.offset, r.metadata, r.commit_time_ms) for r in rows]
    if isinstance(operation, OffsetsList):
        return list(decode_strings(answer))
    return None


async def ask_groups(peers: PeerCaller, leader: int, request: GroupsRequest, timeout_s: float) -> GroupsAnswer:
    """Run ``request`` on the group coordinator at ``leader``; raises as :func:`ask_peer`."""
    body = encode_groups_request(request)
    answer = await ask_peer(peers, leader, RequestKind.GROUPS, body, timeout_s, what="group coordinator")
    return decode_groups_answer(request.operation, answer)


async def ask_partition_statuses(
    peers: PeerCaller, node: int, group_ids: Sequence[int], timeout_s: float
) -> list[PartitionStatus] | None:
    """The status of the partitions among ``group_ids`` that ``node`` leads; None if it answered with an
    error. Raises what the transport raises (ConnectionError, TimeoutError)."""
    status, body = await peers.call(node, RequestKind.PARTITION_STATUS, encode_group_ids(group_ids), timeout_s)
    return decode_partition_statuses(body) if status == STATUS_OK else None


async def ask_moves(peers: PeerCaller, leader: int, timeout_s: float) -> list[MoveReport]:
    """The replica moves the controller leader ``leader`` has in flight; the error it answered with, or what
    the transport raises (ConnectionError, TimeoutError)."""
    status, body = await peers.call(leader, RequestKind.MOVES, b"", timeout_s)
    if status != STATUS_OK:
        raise decode_error(body, source=f"controller leader {leader}")
    return decode_moves(body)


async def ask_capacity(peers: PeerCaller, node: int, timeout_s: float) -> NodeCapacity | None:
    """What ``node`` can still store; None if it answered with an error. Raises what the transport raises
    (ConnectionError, TimeoutError) and InvalidArgumentError (a ValueError) for an undecodable report."""
    status, body = await peers.call(node, RequestKind.CAPACITY, b"", timeout_s)
    return decode_capacity(body) if status == STATUS_OK else None
