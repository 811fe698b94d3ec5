"""The peer side of node-to-node requests: decode a typed request, hand it to its service, encode the answer
(event loop).

A request that fails (a malformed body, a refused operation, or a bug) is answered with the error in the
client path's encoding; the connection and the node go on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from multiraft.errors import MultiraftError
from multiraft.logging import get_logger
from multiraft.node.cluster.controller_client import RemoteController
from multiraft.node.cluster.directory import Directory
from multiraft.node.peer.consumer_group_messages import decode_groups_request, encode_groups_answer
from multiraft.node.peer.messages import (
    STATUS_ERROR,
    STATUS_OK,
    RequestKind,
    decode_controller_request,
    decode_group_ids,
    decode_leaders,
    decode_offsets_request,
    encode_capacity,
    encode_controller_outcome,
    encode_error,
    encode_moves,
    encode_offset_rows,
    encode_partition_statuses,
    encode_strings,
)
from multiraft.node.protocols import StoreHandle
from multiraft.node.services.consumer_groups import ConsumerGroupsService
from multiraft.node.services.offsets import OffsetsService
from multiraft.node.threads import LoopOwned
from multiraft.node.vocabulary.offsets import CommittedOffset, OffsetRow, OffsetsFetch, OffsetsList
from multiraft.node.vocabulary.status import MoveReport

__all__ = ["PeerService", "error_answer"]

log = get_logger(__name__)


def error_answer(error: MultiraftError) -> tuple[int, bytes]:
    """The answer to a request that failed with ``error``: the caller raises it as the same class."""
    return STATUS_ERROR, encode_error(error)


class _Catchup(Protocol):
    async def serve(self, from_node: int, kind: int, body: bytes) -> tuple[int, bytes]: ...


class PeerService(LoopOwned):
    """Serves every REQUEST kind a peer may send (``RequestKind``)."""

    def __init__(
        self,
        controller: RemoteController,
        store: StoreHandle,
        offsets: OffsetsService,
        directory: Directory,
        moves: Callable[[], list[MoveReport]],
        catchup: _Catchup,
        groups: ConsumerGroupsService | None = None,
    ) -> None:
        self._controller = controller
        self._store = store
        self._offsets = offsets
        self._directory = directory
        self._moves = moves
        self._catchup = catchup
        self._groups = groups
        self._handlers: dict[int, Callable[[int, bytes], Awaitable[bytes]]] = {
            RequestKind.CONTROLLER: self._controller_request,
            RequestKind.PARTITION_STATUS: self._partition_status,
            RequestKind.OFFSETS: self._offsets_request,
            RequestKind.MOVES: self._moves_request,
            RequestKind.LEADERS: self._leaders,
            RequestKind.CAPACITY: self._capacity,
            RequestKind.GROUPS: self._groups_request,
        }

    async def serve(self, from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        handler = self._handlers.get(kind)
        try:
            if kind == RequestKind.SEGMENT_CHUNK:
                return await self._catchup.serve(from_node, kind, body)
            if handler is None:
                raise MultiraftError(f"unknown peer request kind {kind}")
            return STATUS_OK, await handler(from_node, body)
        except MultiraftError as exc:
            return error_answer(exc)
        except Exception as exc:  # a bug handling one request fails that request only
            log.exception("peer request failed unexpectedly", peer=from_node, kind=kind, bytes=len(body))
            return error_answer(MultiraftError(f"internal error serving request kind {kind}: {exc!r}"))

    async def _controller_request(self, from_node: int, body: bytes) -> bytes:
        outcome = await self._controller.serve(from_node, decode_controller_request(body))
        return encode_controller_outcome(outcome)

    async def _partition_status(self, from_node: int, body: bytes) -> bytes:
        return encode_partition_statuses(await self._store.partition_status(decode_group_ids(body)))

    async def _offsets_request(self, from_node: int, body: bytes) -> bytes:
        request = decode_offsets_request(body)
        result = await self._offsets.serve(request)
        if isinstance(request.operation, OffsetsFetch):
            found: list[CommittedOffset] = result
            return encode_offset_rows(
                [OffsetRow(o.topic, o.partition, o.offset, o.metadata, o.commit_time_ms) for o in found]
            )
        if isinstance(request.operation, OffsetsList):
            return encode_strings([str(name) for name in result])
        return b""

    async def _groups_request(self, from_node: int, body: bytes) -> bytes:
        if self._groups is None:
            raise MultiraftError("this node runs no group coordinators")
        request = decode_groups_request(body)
        return encode_groups_answer(request.operation, await self._groups.serve(request))

    async def _moves_request(self, from_node: int, body: bytes) -> bytes:
        return encode_moves(self._moves())

    async def _capacity(self, from_node: int, body: bytes) -> bytes:
        return encode_capacity(await self._store.capacity())

    async def _leaders(self, from_node: int, body: bytes) -> bytes:
        self._directory.learn_leaders(decode_leaders(body))
        return b""
