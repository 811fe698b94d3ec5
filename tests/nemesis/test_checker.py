"""The checker finds each anomaly in a history, and passes a clean one (no cluster: histories are built here)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from multiraft.tools.nemesis import Event, History, check, load_history


class _Script:
    """Builds a history: sends acknowledged at offsets, reads, commits, the runner's closing events."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.time = 0.0
        self.log: dict[int, list[str]] = {}

    def add(self, process: str, type_: Any, f: str, **value: Any) -> None:
        self.time += 0.01
        self.events.append(Event(self.time, process, type_, f, value))

    def send(self, value: str, *, partition: int = 0, write: bool = True, ack: bool = True) -> None:
        key = f"k{partition}"  # one key per partition, as the partitioner would place them
        self.add(value.split(":", maxsplit=1)[0], "invoke", "send", key=key, value=value)
        offset = len(self.log.setdefault(partition, []))
        if write:
            self.log[partition].append(value)
        if ack:
            self.add(
                value.split(":", maxsplit=1)[0], "ok", "send", key=key, value=value, partition=partition, offset=offset
            )

    def close(
        self, *, divergent: list[str] | None = None, edit: Callable[[dict[int, list[str]]], None] | None = None
    ) -> None:
        """Heal, one more acknowledged write, the final read of the log (``edit`` changes it first)."""
        self.add("runner", "ok", "heal-all")
        self.send("producer-0:9999", partition=9)  # the write that shows the cluster recovered
        log = {p: list(values) for p, values in self.log.items()}
        if edit is not None:
            edit(log)
        rows = [[p, o, f"k{p}", v] for p, values in log.items() for o, v in enumerate(values)]
        self.add("final", "ok", "final-read", rows=rows, positions={str(p): len(v) for p, v in log.items()})
        self.add("runner", "ok", "replicas", compared=3, divergent=divergent or [])


def _clean() -> _Script:
    script = _Script()
    for n in range(5):
        script.send(f"producer-0:{n}")
        script.send(f"producer-1:{n}", partition=1)
    return script


def test_a_clean_history_is_valid_and_counts_what_it_saw() -> None:
    script = _clean()
    script.close()
    result = check(script.events)
    assert result.valid, result.problems()
    assert (result.acknowledged, result.read_back) == (11, 11)
    assert result.recovery_s is not None and result.recovery_s < 1


def test_an_acknowledged_record_missing_from_the_log_is_lost() -> None:
    script = _clean()
    script.send("producer-0:5", write=False)
    script.close()
    result = check(script.events)
    assert (result.lost, result.valid) == (1, False)
    assert "producer-0:5" in result.examples["lost"][0]


def test_an_acknowledgement_naming_another_records_offset_is_misplaced_and_the_record_lost() -> None:
    # What an idempotent producer sees when its batch is taken for a duplicate of another one.
    script = _clean()
    script.send("producer-0:5")
    script.add("producer-0", "invoke", "send", key="k0", value="producer-0:4b")
    script.add("producer-0", "info", "send", key="k0", value="producer-0:4b", error="StorageFailureError")
    script.close(edit=lambda log: log[0].__setitem__(5, "producer-0:4b"))
    result = check(script.events)
    assert result.lost == 1 and not result.valid


def test_a_record_read_twice_in_the_log_is_duplicated() -> None:
    script = _clean()
    script.log[0].append("producer-0:3")
    script.close()
    assert check(script.events).duplicated == 1


def test_a_record_nobody_sent_is_unexpected() -> None:
    script = _clean()
    script.log[1].append("producer-7:1")
    script.close()
    assert check(script.events).unexpected == 1


def test_records_of_one_key_out_of_send_order_are_reordered() -> None:
    script = _clean()
    script.close(edit=lambda log: log[0].__setitem__(slice(0, 2), ["producer-0:1", "producer-0:0"]))
    result = check(script.events)
    assert result.reordered == 1
    assert result.misplaced == 2  # and their acknowledgements named the other offsets


def test_a_read_of_a_record_the_final_log_does_not_hold_there_saw_an_uncommitted_record() -> None:
    script = _clean()
    script.add("reader", "ok", "read", rows=[[0, 2, "k0", "producer-0:2"], [0, 3, "k0", "producer-1:77"]])
    script.send("producer-1:77", write=False, ack=False)
    script.close()
    result = check(script.events)
    assert result.uncommitted_reads == 1


def test_committed_offsets_that_go_back_are_regressions() -> None:
    script = _clean()
    script.add("group", "ok", "commit", offsets={"0": 5})
    script.add("group", "invoke", "committed")
    script.add("group", "ok", "committed", offsets={"0": 5})
    script.add("group", "invoke", "committed")
    script.add("group", "ok", "committed", offsets={"0": 3})
    script.close()
    assert check(script.events).offset_regressions == 1


def test_committed_offsets_below_an_acknowledged_commit_are_regressions() -> None:
    script = _clean()
    script.add("group", "ok", "commit", offsets={"0": 5})
    script.add("group", "invoke", "committed")
    script.add("group", "ok", "committed", offsets={"0": 4})
    script.close()
    assert check(script.events).offset_regressions == 1


def test_divergent_replicas_and_replicas_that_cannot_be_compared_fail_the_run() -> None:
    script = _clean()
    script.add("runner", "fail", "replicas", error="node 3: CorruptionError")
    script.close(divergent=["nemesis/0: nodes 1 and 2 differ at index 7"])
    assert check(script.events).divergent_replicas == 2


def test_a_cluster_that_acknowledges_nothing_after_the_heal_within_the_bound_fails() -> None:
    script = _clean()
    script.add("runner", "ok", "heal-all")
    script.add("producer-0", "invoke", "send", key="k0", value="producer-0:100")
    rows = [[p, o, f"k{p}", v] for p, values in script.log.items() for o, v in enumerate(values)]
    script.add("final", "ok", "final-read", rows=rows)
    result = check(script.events)
    assert result.recovery_s is None and not result.valid


def test_records_beyond_where_the_final_read_was_stopped_are_unreadable_not_lost() -> None:
    script = _clean()
    script.add("runner", "ok", "heal-all")
    script.send("producer-0:100")
    rows = [[0, o, "k0", v] for o, v in enumerate(script.log[0][:2])] + [
        [1, o, "k1", v] for o, v in enumerate(script.log[1])
    ]
    script.add("final", "fail", "final-read", error="CRC mismatch", rows=rows, positions={"0": 2, "1": 5})
    result = check(script.events)
    assert (result.unreadable, result.lost, result.final_read_complete) == (4, 0, False)


def test_timed_out_sends_may_be_missing_or_present_once() -> None:
    script = _clean()
    script.add("producer-0", "invoke", "send", key="k0", value="producer-0:50")
    script.add("producer-0", "info", "send", key="k0", value="producer-0:50", error="RequestTimeoutError")
    script.add("producer-0", "invoke", "send", key="k0", value="producer-0:51")
    script.add("producer-0", "info", "send", key="k0", value="producer-0:51", error="RequestTimeoutError")
    script.log[0].append("producer-0:51")
    script.close()
    result = check(script.events)
    assert result.valid, result.problems()
    assert result.indeterminate == 2


def test_a_history_file_is_checked_again_with_the_same_result(tmp_path: Path) -> None:
    script = _clean()
    script.send("producer-0:5", write=False)
    script.close()
    with History(tmp_path / "history.jsonl") as history:
        for event in script.events:
            history.record(event.process, event.type, event.f, **event.value)
    again = check(load_history(tmp_path / "history.jsonl"))
    assert (again.lost, again.acknowledged, again.valid) == (1, 12, False)


@given(st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=40))
def test_whatever_is_acknowledged_and_written_once_passes(sends: list[tuple[int, bool]]) -> None:
    script = _Script()
    for n, (partition, acked) in enumerate(sends):
        script.send(f"producer-0:{n}", partition=partition, ack=acked)
        if not acked:
            script.add("producer-0", "info", "send", key=f"k{partition}", value=f"producer-0:{n}", error="timeout")
    script.close()
    result = check(script.events)
    assert result.valid, result.problems()
    assert result.acknowledged == sum(1 for _, acked in sends if acked) + 1


def test_a_drain_that_does_not_finish_within_its_bound_is_a_stalled_drain() -> None:
    script = _clean()
    script.add("nemesis", "info", "drain", node=1, error="not drained in time, kept: 8 replicas left")
    script.close()
    result = check(script.events)
    assert (result.stalled_drains, result.valid) == (1, False)


def test_a_log_a_node_kept_past_the_removal_bound_for_a_replica_moved_off_it_is_a_retained_replica() -> None:
    script = _clean()
    script.add("runner", "ok", "removals", waited_s=0.0, bound_s=15.0)  # an earlier look found nothing
    script.add("runner", "info", "removals", kept=["node 2: nemesis/1", "node 4: nemesis/0"], bound_s=15.0)
    script.close()
    result = check(script.events)
    assert (result.retained_replicas, result.valid) == (2, False)
    assert "node 2: nemesis/1" in result.examples["retained_replicas"][0]


def test_stores_that_could_not_be_looked_at_for_removed_replicas_fail_the_run() -> None:
    script = _clean()
    script.add("runner", "info", "removals", kept=[], bound_s=15.0, error="node 3: Error('lock')")
    script.close()
    assert check(script.events).retained_replicas == 1


def test_only_the_wait_for_the_last_placement_judges_what_nodes_gave_back() -> None:
    """Seed 23025 (five nodes): two more moves came after the first placement was taken; the runner took the
    placement again and waited again, and what the first wait saw kept is judged by the second."""
    script = _clean()
    script.add("runner", "info", "removals", kept=["node 3: nemesis/0"], bound_s=15.0)
    script.add("runner", "ok", "removals", waited_s=5.0, bound_s=15.0)
    script.close()
    result = check(script.events)
    assert result.valid, result.problems()


def test_removals_given_back_within_the_bound_pass() -> None:
    script = _clean()
    script.add("runner", "ok", "removals", waited_s=4.5, bound_s=15.0)
    script.close()
    result = check(script.events)
    assert result.valid, result.problems()
