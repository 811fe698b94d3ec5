"""One rule on the peer port too: a REQUEST whose handling raises unexpectedly fails that request alone.

Each request kind's service is made to raise once; the request answers STATUS_ERROR with an INTERNAL error
that names the kind, and the same request then succeeds. The table must name every request kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from multiraft import controller as ctl
from multiraft.node.peer.consumer_group_messages import encode_groups_request
from multiraft.node.peer.messages import (
    STATUS_ERROR,
    STATUS_OK,
    RequestKind,
    decode_error,
    encode_controller_request,
    encode_group_ids,
    encode_leaders,
    encode_offsets_request,
)
from multiraft.node.services.peer_requests import PeerService
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.consumer_groups import GroupsList, GroupsRequest
from multiraft.node.vocabulary.controller import ControllerOutcome, ControllerRequest
from multiraft.node.vocabulary.offsets import OffsetsList, OffsetsRequest
from multiraft.node.vocabulary.status import LeaderAnnouncement


@dataclass
class Faulty:
    """Every dependency of PeerService at once, each raising once when told to."""

    faults: dict[str, BaseException] = field(default_factory=dict)

    def _step(self, method: str) -> None:
        fault = self.faults.pop(method, None)
        if fault is not None:
            raise fault

    async def serve(self, *args: Any) -> Any:  # the controller, offsets, groups and catch-up share the name
        if len(args) == 3:
            self._step("catchup")
            return STATUS_OK, b"chunk"
        if isinstance(args[-1], ControllerRequest):
            self._step("controller")
            return ControllerOutcome()
        if isinstance(args[-1], GroupsRequest):
            self._step("groups")
            return b""
        self._step("offsets")
        return ["g"]

    async def partition_status(self, group_ids: Any) -> list[Any]:
        self._step("partition_status")
        return []

    def learn_leaders(self, leaders: Any) -> None:
        self._step("learn_leaders")

    def moves(self) -> list[Any]:
        self._step("moves")
        return []

    async def capacity(self) -> NodeCapacity:
        self._step("capacity")
        return NodeCapacity(
            node_id=5, assigned=0, free_segments=10, reserved_segments=1, disk_free_bytes=1, map_free_bytes=1, short=""
        )


KINDS: dict[RequestKind, tuple[str, bytes]] = {
    RequestKind.CONTROLLER: ("controller", encode_controller_request(ControllerRequest(ctl.DeleteTopic("t")))),
    RequestKind.PARTITION_STATUS: ("partition_status", encode_group_ids([1, 2])),
    RequestKind.LEADERS: ("learn_leaders", encode_leaders([LeaderAnnouncement(1, 2, 3)])),
    RequestKind.OFFSETS: ("offsets", encode_offsets_request(OffsetsRequest(1, OffsetsList()))),
    RequestKind.MOVES: ("moves", b""),
    RequestKind.CAPACITY: ("capacity", b""),
    RequestKind.GROUPS: ("groups", encode_groups_request(GroupsRequest(1, GroupsList()))),
    RequestKind.SEGMENT_CHUNK: ("catchup", b"any"),
}
FAULTS: list[Callable[[], Exception]] = [
    lambda: RuntimeError("boom"),
    lambda: TypeError("'int' object is not iterable"),
    lambda: OverflowError("int too big to convert"),
]


def test_the_table_covers_every_request_kind() -> None:
    assert set(KINDS) == set(RequestKind)


@pytest.mark.parametrize("kind", list(RequestKind), ids=lambda kind: kind.name)
@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: type(fault()).__name__)
def test_an_exception_in_any_peer_request_handler_fails_that_request_alone(
    kind: RequestKind, fault: Callable[[], Exception]
) -> None:
    method, body = KINDS[kind]
    faulty = Faulty(faults={method: fault()})
    service = PeerService(faulty, faulty, faulty, faulty, faulty.moves, faulty, faulty)  # type: ignore[arg-type]

    async def scenario() -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        return await service.serve(5, kind, body), await service.serve(5, kind, body)

    (status, answer), (again, _) = asyncio.run(scenario())

    assert status == STATUS_ERROR
    error = decode_error(answer)
    assert error.reason == "INTERNAL" and str(int(kind)) in error.message and type(fault()).__name__ in error.message
    assert again == STATUS_OK
