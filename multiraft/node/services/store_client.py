"""The event loop's handle on the :class:`~multiraft.node.scheduler.store.Store`: each call is handed to the
scheduler thread
and its answer awaited on the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from multiraft.errors import RequestTimeoutError
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.threads import LoopOwned, SchedulerHandoff
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.controller import ControllerRequest
from multiraft.node.vocabulary.offsets import OffsetsCommit, OffsetsFetch, OffsetsList
from multiraft.node.vocabulary.partitions import ProduceResult
from multiraft.node.vocabulary.status import PartitionStatus
from storage.batch import BatchHeader

if TYPE_CHECKING:
    from multiraft.node.scheduler.store import Store

__all__ = ["StoreClient"]

_REQUEST_TIMEOUT_S = 15.0


class StoreClient(LoopOwned):
    """The event loop's handle on the store (a ``StoreHandle``): each call is handed to the scheduler."""

    def __init__(self, store: Store, handoff: SchedulerHandoff) -> None:
        self._store = store
        self._handoff = handoff

    def produce(self, view: PartitionView, batch: bytes, header: BatchHeader) -> asyncio.Future[ProduceResult]:
        future, completion = self._handoff.completion()
        store = self._store
        self._handoff.submit(lambda: store.produce(view, batch, header, completion))
        return future

    async def delete_records(self, view: PartitionView, offset: int, timeout_s: float) -> int:
        """DeleteRecords on the partition's leader: the log start offset once the TRIM entry is applied."""
        future, completion = self._handoff.completion()
        store = self._store
        self._handoff.submit(lambda: store.delete_records(view, offset, completion))
        return int(await _within(future, "the records deletion was not committed in time", timeout_s))

    async def offsets(self, group_id: int, operation: OffsetsCommit | OffsetsFetch | OffsetsList) -> Any:
        future, completion = self._handoff.completion()
        store = self._store
        self._handoff.submit(lambda: store.offsets(group_id, operation, completion))
        return await _within(future, "the offsets request was not applied in time")

    async def controller(self, request: ControllerRequest, timeout_s: float) -> Any:
        future, completion = self._handoff.completion()
        store = self._store
        self._handoff.submit(lambda: store.controller_request(request, completion))
        return await _within(future, "the controller did not commit the request in time", timeout_s)

    async def partition_status(self, group_ids: Sequence[int]) -> list[PartitionStatus]:
        store = self._store
        return await asyncio.wait_for(self._handoff.run(lambda: store.partition_status(group_ids)), 5.0)

    async def capacity(self) -> NodeCapacity:
        store = self._store
        return await asyncio.wait_for(self._handoff.run(store.capacity), 5.0)


async def _within(future: asyncio.Future[Any], message: str, timeout_s: float = _REQUEST_TIMEOUT_S) -> Any:
    try:
        return await asyncio.wait_for(future, max(0.01, timeout_s))
    except TimeoutError:
        raise RequestTimeoutError(message) from None
