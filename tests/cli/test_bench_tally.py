"""How a ``multiraft bench`` producer worker counts acknowledgements: every record in its result, and the
parent's progress counter in blocks (plus the rest at the end)."""

from __future__ import annotations

import multiprocessing

from multiraft.tools.cli._bench_worker import _COUNTER_EVERY, WorkerResult, _Tally


def test_the_tally_counts_every_record_and_feeds_the_progress_counter_in_blocks() -> None:
    counter = multiprocessing.get_context("spawn").Value("q", 0)
    result = WorkerResult(0)
    tally = _Tally(result, counter)
    for _ in range(_COUNTER_EVERY - 1):
        tally.record_callback(None, None)
    assert counter.value == 0
    tally.record_callback(None, None)
    assert result.records == counter.value == _COUNTER_EVERY
    tally.batch_callback(3)  # made, not called: counts nothing
    tally.record_callback(None, RuntimeError("lost"))
    tally.record_callback(None, None)
    assert (result.failed, result.first_error) == (1, "lost")
    tally.report_rest()
    assert result.records == counter.value == _COUNTER_EVERY + 1


def test_a_tally_without_a_counter_only_fills_the_result() -> None:
    result = WorkerResult(0)
    tally = _Tally(result, None)
    for _ in range(2 * _COUNTER_EVERY):
        tally.record_callback(None, None)
    tally.report_rest()
    assert result.records == 2 * _COUNTER_EVERY


def test_batch_and_record_acknowledgements_add_up_in_the_result() -> None:
    result = WorkerResult(0)
    tally = _Tally(result, None)
    for _ in range(_COUNTER_EVERY + 5):
        tally.record_callback(None, None)
    tally.done(1000, None)  # a send_batch() call's records
    tally.report_rest()
    assert result.records == _COUNTER_EVERY + 5 + 1000


def test_the_last_acknowledgement_time_is_when_the_last_record_was_acknowledged_not_when_counted() -> None:
    result = WorkerResult(0)
    tally = _Tally(result, None)
    tally.record_callback(None, None)
    acked = tally.last_ack
    tally.report_rest()  # later: the run's elapsed time ends at the acknowledgement
    assert tally.last_ack == acked and result.records == 1
