"""The end of a run: which replicas are compared, which stored logs a node must have given back, and the
read of a store's log names (no cluster: logs and placements are built here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from multiraft.tools.nemesis.replicas import LogEntries, Placement, compare_logs, stored_logs_live, unplaced_logs
from storage import LogStore


def _log(last: int, *, term: int = 2, first: int = 1) -> LogEntries:
    return [(i, term, 0, f"entry {i}".encode()) for i in range(first, last + 1)]


# The five-node run: nemesis/1 moved off node 2 at the end, node 2 applied its removal at index 956
# and still stored that log when the run stopped; nodes 1, 3 and 4 hold it to index 1015.
_MOVED = {
    1: {("nemesis", 1): _log(1015)},
    2: {("nemesis", 1): _log(956)},
    3: {("nemesis", 1): _log(1015)},
    4: {("nemesis", 1): _log(1015)},
}
_AFTER_THE_MOVE = Placement({"nemesis/1": [1, 3, 4]}, {"nemesis/1": []})


def test_a_log_left_on_a_node_the_final_placement_moved_the_replica_off_is_not_compared() -> None:
    compared, divergent, left_out = compare_logs(_MOVED, _AFTER_THE_MOVE)
    assert (compared, divergent, left_out) == (1, [], ["node 2: nemesis/1"])


def test_without_a_placement_every_stored_log_is_compared() -> None:
    _, divergent, _ = compare_logs(_MOVED, None)
    assert divergent == ["nemesis/1: nodes 1 and 2 end at different indexes (1015 vs 956)"]


def test_placed_replicas_whose_logs_differ_are_divergent() -> None:
    logs = {1: {("nemesis", 0): _log(10)}, 3: {("nemesis", 0): _log(10, term=3)}, 4: {("nemesis", 0): _log(10)}}
    _, divergent, _ = compare_logs(logs, Placement({"nemesis/0": [1, 3, 4]}, {}))
    assert divergent == ["nemesis/0: nodes 1 and 3 differ at index 1 (terms 2 vs 3, 7 vs 7 bytes)"]


def test_a_placed_replica_that_stores_no_log_is_divergent() -> None:
    logs = {1: {("nemesis", 0): _log(10)}, 3: {("nemesis", 0): _log(10)}, 4: {}}
    _, divergent, _ = compare_logs(logs, Placement({"nemesis/0": [1, 3, 4]}, {}))
    assert divergent == ["nemesis/0: node 4 is a replica and holds no log"]


def test_replicas_that_compacted_different_prefixes_agree_over_what_they_share() -> None:
    logs = {1: {("nemesis", 0): _log(10)}, 2: {("nemesis", 0): _log(10, first=6)}}
    assert compare_logs(logs, Placement({"nemesis/0": [1, 2]}, {}))[:2] == (1, [])


_PLACED = Placement({"nemesis/2": [1, 3, 4]}, {})


def test_a_replica_may_lack_only_entries_past_every_stored_commit_at_the_stop() -> None:
    """Five-node run seed 17: node 4 became leader (a hand-back to the preferred leader) and appended its first
    entry of the new term just before the freeze; nodes 1 and 3 never got it. Uncommitted: not a divergence."""
    logs = {1: {("nemesis", 2): _log(2603)}, 3: {("nemesis", 2): _log(2603)}, 4: {("nemesis", 2): _log(2604)}}
    commits = {n: {("nemesis", 2): 2603} for n in (1, 3, 4)}
    assert compare_logs(logs, _PLACED, commits)[:2] == (1, [])


def test_a_replica_that_lacks_a_committed_entry_at_the_stop_is_divergent() -> None:
    logs = {1: {("nemesis", 2): _log(2603)}, 3: {("nemesis", 2): _log(2600)}, 4: {("nemesis", 2): _log(2603)}}
    commits = {1: {("nemesis", 2): 2603}, 3: {("nemesis", 2): 2600}, 4: {("nemesis", 2): 2602}}
    _, divergent, _ = compare_logs(logs, _PLACED, commits)
    assert divergent == ["nemesis/2: nodes 1 and 3 end at different indexes (2603 vs 2600, committed 2603)"]


def test_a_node_that_stores_a_log_of_a_partition_the_placement_does_not_give_it_has_not_given_it_back() -> None:
    placement = Placement({"nemesis/0": [1, 2, 3], "nemesis/1": [2, 3, 4]}, {"nemesis/1": [1]})
    stored = {
        1: {("nemesis", 0), ("nemesis", 1), ("side-7", 0)},  # a learner of nemesis/1; side topics are not judged
        4: {("nemesis", 0), ("nemesis", 1)},
        5: {("nemesis", 1)},
    }
    assert unplaced_logs(placement, stored) == ["node 4: nemesis/0", "node 5: nemesis/1"]


def test_the_live_read_of_a_store_lists_the_logs_the_store_lists(tmp_path: Path) -> None:
    with LogStore.open(tmp_path) as store:
        for topic, partition in (("nemesis", 0), ("nemesis", 11), ("__consumer_offsets", 3), ("side-7", 2)):
            store.log(topic, partition)
        store.delete_log("nemesis", 0)
        store.sync()
        expected = set(store.logs())
    assert stored_logs_live(tmp_path) == expected == {("nemesis", 11), ("__consumer_offsets", 3), ("side-7", 2)}


def test_a_data_directory_without_a_store_lists_no_logs(tmp_path: Path) -> None:
    assert stored_logs_live(tmp_path) == set()


def test_the_live_read_sees_the_store_of_a_process_that_holds_it_open(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from storage import LogStore\n"
        f"store = LogStore.open({str(tmp_path)!r})\n"
        "store.log('nemesis', 0); store.log('nemesis', 1); store.sync()\n"
        "store.delete_log('nemesis', 0); store.sync()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "store.close()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            assert stored_logs_live(tmp_path) == {("nemesis", 1)}
        finally:
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(timeout=30)


def test_a_partition_the_placement_cannot_describe_stored_on_more_nodes_than_its_replicas_was_not_given_back() -> None:
    stored = {
        1: {("__consumer_offsets", 0), ("__consumer_offsets", 1)},
        2: {("__consumer_offsets", 0), ("__consumer_offsets", 1)},
        3: {("__consumer_offsets", 0), ("__consumer_offsets", 1)},
        4: {("__consumer_offsets", 1)},
    }
    kept = unplaced_logs(Placement({}, {}), stored, counted=("__consumer_offsets",), replication=3)
    assert kept == ["nodes [1, 2, 3, 4]: __consumer_offsets/1 (4 stored copies of 3 replicas)"]
