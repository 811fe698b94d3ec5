"""The data service's budgets (issue 13): a fetch is clamped to the node's ceiling, as Kafka clamps to
fetch.max.bytes, and batches uncommitted on the node are bounded in bytes; a batch above the budget is refused
RESOURCE_EXHAUSTED (retriable) before it is proposed, and the budget is freed at commit, failure or timeout."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from multiraft.errors import InvalidArgumentError, NotLeaderError, RequestTimeoutError, ResourceExhaustedError
from multiraft.node.vocabulary.partitions import ProduceResult
from storage import ReadResult
from tests.node._fakes import FakeLog, FakeStore, lead
from tests.node.test_services import LIMITS, batch, data_service


class RecordingLog(FakeLog):
    def __init__(self) -> None:
        super().__init__(data=b"records")
        self.asked: list[int] = []

    def read(self, offset: int, max_bytes: int, *, max_offset: int) -> Any:
        self.asked.append(max_bytes)
        return ReadResult(self.data, 1, max_offset, 0, max_offset)


def test_a_fetch_asking_for_nearly_2_gib_reads_at_most_the_node_s_ceiling() -> None:
    async def scenario() -> list[int]:
        service, found, _, _ = data_service(limits=replace(LIMITS, fetch_max_bytes_limit=4096))
        log = RecordingLog()
        lead(found, "orders", 0, high_watermark=10, log=log)
        await service.fetch("orders", 0, 0, 2**31 - 1, 0)
        await service.fetch("orders", 0, 0, 100, 0)
        await service.fetch("orders", 0, 0, 0, 0)  # none asked: the default, itself within the ceiling
        return log.asked

    assert asyncio.run(scenario()) == [4096, 100, 4096]


def test_batches_beyond_the_node_s_in_flight_budget_are_refused_until_earlier_ones_commit() -> None:
    async def scenario() -> None:
        one = batch(b"x" * 200)
        budget = 2 * len(one) + 10
        service, found, store, _ = data_service(limits=replace(LIMITS, max_inflight_produce_bytes=budget))
        lead(found, "orders", 0)
        pending = _capture_futures(store)
        store.produce_results = [None, None]  # the first two never commit by themselves
        first = service.begin_produce("orders", 0, one, 10_000)
        second = service.begin_produce("orders", 0, one, 10_000)
        with pytest.raises(ResourceExhaustedError) as caught:
            await service.begin_produce("orders", 0, one, 10_000)
        assert caught.value.metadata["field"] == "max_inflight_produce_bytes" and caught.value.retriable
        assert len(store.produced) == 2, "the refused batch was never handed to the store"
        store.produce_results = [ProduceResult(2, 7)]
        # a commit of the first frees its bytes
        pending[0].set_result(ProduceResult(0, 7))
        assert (await first).base_offset == 0
        assert (await service.begin_produce("orders", 0, one, 10_000)).base_offset == 2
        # a failure and a timeout free theirs too
        pending[1].set_exception(NotLeaderError("moved"))
        with pytest.raises(NotLeaderError):
            await second
        store.produce_results = [None, None]
        timed_out = service.begin_produce("orders", 0, one, 20)
        with pytest.raises(RequestTimeoutError):
            await timed_out
        store.produce_results = [ProduceResult(4, 7), ProduceResult(5, 7)]
        answers = [await service.begin_produce("orders", 0, one, 10_000) for _ in range(2)]
        assert [a.base_offset for a in answers] == [4, 5]

    asyncio.run(scenario())


def _capture_futures(store: FakeStore) -> list[asyncio.Future[ProduceResult]]:
    """The futures the store hands out, so the test can settle them."""
    futures: list[asyncio.Future[ProduceResult]] = []
    produce = store.produce

    def capturing(*args: Any) -> asyncio.Future[ProduceResult]:
        futures.append(produce(*args))
        return futures[-1]

    store.produce = capturing  # type: ignore[method-assign]
    return futures


def test_a_time_lookup_before_the_epoch_is_refused_naming_timestamp_ms() -> None:
    service, found, _, _ = data_service()
    lead(found, "orders", 0, high_watermark=5, log=FakeLog(by_timestamp={-1: 0}))
    with pytest.raises(InvalidArgumentError) as caught:
        service.list_offset("orders", 0, "timestamp", -1)
    assert caught.value.field == "timestamp_ms"
    assert service.list_offset("orders", 0, "timestamp", 0) == -1
