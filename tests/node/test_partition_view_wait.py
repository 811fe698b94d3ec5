"""A reader waiting on a partition view (a long-poll fetch, a Subscribe stream) wakes when the high watermark
passes its offset, when the replica stops leading, or at its timeout, and leaves nothing behind."""

from __future__ import annotations

import asyncio

from multiraft.node.replicas.partition import PartitionView

WAIT_S = 30.0  # far longer than any test takes: a test that reaches it has failed


def _view() -> PartitionView:
    view = PartitionView("orders", 0, 1, None)  # type: ignore[arg-type]  # waiting never reads the log
    _lead(view, high_watermark=5)
    return view


def _lead(view: PartitionView, *, high_watermark: int, leader: bool = True, term: int = 1) -> None:
    view.update(high_watermark=high_watermark, log_start_offset=0, leader_id=1, term=term, leader=leader, current=True)


def test_a_reader_past_the_high_watermark_wakes_in_the_round_that_moves_it() -> None:
    async def scenario() -> None:
        view = _view()
        reader = asyncio.ensure_future(view.wait_past(5, WAIT_S))
        await asyncio.sleep(0)
        assert not reader.done()
        _lead(view, high_watermark=6)
        await asyncio.sleep(0)  # one round: the reader's task runs in it
        assert reader.done()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_reader_keeps_waiting_while_the_high_watermark_has_not_passed_its_offset() -> None:
    async def scenario() -> None:
        view = _view()
        reader = asyncio.ensure_future(view.wait_past(7, WAIT_S))
        _lead(view, high_watermark=6)
        for _ in range(3):
            await asyncio.sleep(0)
        assert not reader.done()
        _lead(view, high_watermark=8)
        await asyncio.wait_for(reader, 5)

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_reader_on_a_replica_that_stops_leading_wakes_at_once() -> None:
    async def scenario() -> None:
        view = _view()
        reader = asyncio.ensure_future(view.wait_past(5, WAIT_S))
        await asyncio.sleep(0)
        _lead(view, high_watermark=5, leader=False, term=2)
        await asyncio.wait_for(reader, 5)

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_readers_that_time_out_or_are_cancelled_leave_no_waiter_behind() -> None:
    async def scenario() -> None:
        view = _view()
        for _ in range(50):  # an idle partition: every long poll ends at its timeout
            await view.wait_past(5, 0.001)
        cancelled = asyncio.ensure_future(view.wait_past(5, WAIT_S))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert view._waiters == []
        assert view.high_watermark == 5

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_several_readers_of_one_partition_all_wake() -> None:
    async def scenario() -> None:
        view = _view()
        readers = [asyncio.ensure_future(view.wait_past(5, WAIT_S)) for _ in range(3)]
        await asyncio.sleep(0)
        _lead(view, high_watermark=9)
        await asyncio.wait_for(asyncio.gather(*readers), 5)

    asyncio.run(asyncio.wait_for(scenario(), 10))
