"""Reading trace files (multiraft.tools.cli._bench_trace): lines of one batch from every process are joined by their
keys, and each polled record gets the time since its send() of every stage it went through."""

from __future__ import annotations

from pathlib import Path

from multiraft.tools.cli._bench_trace import STAGES, breakdown, format_breakdown, join_batches, read_lines

MS = 1_000_000  # ns


def _lines(*items: tuple[float, str, str]) -> list[tuple[int, str, list[str]]]:
    return [(round(t * MS), stage, keys.split()) for t, stage, keys in items]


# One batch of two records (offsets 10 and 11 of t/0), sent at 0 ms, and the lines it leaves.
_ONE_BATCH = _lines(
    (1, "produce_written", "c77"),
    (2, "leader_received", "c77"),
    (2.5, "proposed", "c77 g5.8"),
    (3, "append_received", "g5.8"),  # node 2
    (3.2, "append_received", "g5.8"),  # node 3: later; the fastest follower counts
    (4, "leader_persisted", "g5.8"),
    (4.5, "follower_persisted", "g5.8"),
    (5, "ack_received", "ug5@9"),
    (6, "applied", "g5.8 bt/0@10+2"),
    (6.5, "hw_visible", "ut/0@12"),
    (7, "pushed", "ut/0@12"),
    (8, "client_received", "ut/0@12"),
    (9, "client_decoded", "ut/0@12"),
    (10, "polled", "rt/0@10 s0"),
    (10, "polled", "rt/0@11 s0"),
)


def test_lines_sharing_a_key_are_one_batch_and_a_stage_takes_its_earliest_line() -> None:
    [batch] = join_batches(_ONE_BATCH)
    assert (batch.partition, batch.base_offset, batch.count, batch.entry) == ("t/0", 10, 2, ("g5", 8))
    assert batch.times["append_received"] == 3 * MS
    assert batch.times["ack_received"] == 5 * MS and batch.times["pushed"] == 7 * MS


def test_a_range_line_covers_only_the_batches_wholly_below_its_offset() -> None:
    lines = _lines(
        (1, "applied", "g5.8 bt/0@10+2"),
        (2, "applied", "g5.9 bt/0@12+3"),
        (3, "pushed", "ut/0@12"),  # the first batch only
        (4, "pushed", "ut/0@14"),  # not yet all of the second
        (5, "pushed", "ut/0@15"),
    )
    first, second = sorted(join_batches(lines), key=lambda b: b.base_offset)
    assert first.times["pushed"] == 3 * MS and second.times["pushed"] == 5 * MS


def test_every_polled_record_gets_each_stage_since_its_send_and_the_step_from_the_stage_before() -> None:
    result = breakdown(_ONE_BATCH)
    assert result["records"] == 2 and result["batches"] == 1
    rows = {row["stage"]: row for row in result["stages"]}
    assert list(rows) == list(STAGES)
    assert rows["leader_received"]["since_send_p50_ms"] == 2.0 and rows["leader_received"]["step_p50_ms"] == 1.0
    assert rows["client_decoded"]["step_p50_ms"] == 1.0 and rows["polled"]["since_send_p50_ms"] == 10.0
    assert all(row["samples"] == 2 for row in rows.values())
    assert "client_received" in format_breakdown(result)


def test_a_record_whose_batch_left_no_lines_still_counts_from_send_to_poll() -> None:
    result = breakdown(_lines((4, "polled", "rt/3@0 s1000000")))
    assert [(row["stage"], row["since_send_p50_ms"]) for row in result["stages"]] == [("send", 0.0), ("polled", 3.0)]


def test_trace_files_are_read_from_every_process_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "node1-10.trace").write_text("100 leader_received c1\n200 proposed c1 g1.1\n")
    (tmp_path / "bench-11.trace").write_text("300 polled rt/0@0 s50\n40")
    (tmp_path / "notes.txt").write_text("1 ignored c9\n")
    assert read_lines(tmp_path) == [
        (300, "polled", ["rt/0@0", "s50"]),
        (100, "leader_received", ["c1"]),
        (200, "proposed", ["c1", "g1.1"]),
    ]
