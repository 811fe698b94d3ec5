"""Seeded nemesis runs against real clusters on 127.0.0.1: one short run per family of faults at three nodes,
and one of every kind of churn at five (where a partition lives on three of the nodes, so rebalancing moves
replicas); under ``-m slow`` also the undrain and rejoin kinds at three and process and network faults at five.

Each run injects every kind of its family at least once (the kinds are dealt from a shuffled deck), heals,
and checks its history: no acknowledged record lost, duplicated or reordered, nothing read that was not
committed, no committed group offset going back, the replicas the final placement names byte-identical,
the logs of replicas moved off a node given back within a bound, writes acknowledged again after the heal.
``-m slow`` runs many longer seeded runs of every kind at 3, 5 and 7 nodes and prints the table of
``docs/reliability.md`` (``multiraft nemesis --runs 100 --nodes N`` does the same from the command line).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from multiraft.tools.nemesis import (
    FAULT_KINDS,
    RunResult,
    RunSettings,
    load_history,
    run_once,
    summarize,
    summary_markdown,
)
from multiraft.tools.nemesis.report import runs_table, summary_table
from multiraft.tools.nemesis.runner import disk_faults_possible

pytestmark = pytest.mark.integration

# Short and bounded for CI: a fault holds 1 to 2.5 s (several election timeouts of 250 to 500 ms).
_CHURN = ("churn", "churn-undrain", "churn-rejoin")


def _run(tmp_path: Path, seed: int, faults: tuple[str, ...], duration_s: float, nodes: int = 3) -> RunResult:
    settings = RunSettings(
        seed, duration_s, faults, nodes, settle_timeout_s=15.0, drain_timeout_s=20.0, recovery_bound_s=30.0
    )
    result = run_once(settings, tmp_path / f"run-{seed}")
    assert set(result.check.faults) == set(faults) - set(result.skipped), f"not every kind ran: {result.check.faults}"
    return result


def _assert_valid(result: RunResult) -> None:
    check = result.check
    assert check.valid, f"seed {result.settings.seed}: {check.problems()}; history {result.history_path}"
    assert check.acknowledged > 0 and check.read_back >= check.acknowledged


def test_kills_of_one_node_a_minority_and_every_node_lose_no_acknowledged_record(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 11, ("kill", "kill-minority", "power-loss"), 1.0))


def test_pauses_of_leaders_and_followers_longer_than_an_election_timeout_lose_nothing(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 12, ("pause-leader", "pause-follower"), 1.0))


def test_partitions_of_every_shape_lose_nothing_and_reads_see_only_committed_records(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 13, ("partition-halves", "partition-bridge", "partition-oneway"), 1.0))


def test_membership_churn_during_writes_loses_nothing_and_the_drained_node_is_removed(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 15, ("churn",), 1.0))


@pytest.mark.slow  # CI time: the five-node churn run below deals these kinds too
def test_drain_undrain_drain_again_and_a_removed_node_that_joins_again_lose_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path, 16, _CHURN[1:], 1.0)
    _assert_valid(result)
    steps = [(e.f, e.type) for e in load_history(result.history_path) if e.process == "nemesis"]
    assert ("undrain", "ok") in steps and ("rejoin", "ok") in steps, steps


def test_five_nodes_under_every_kind_of_churn_move_replicas_and_lose_nothing(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 17, _CHURN, 8.0, nodes=5))


@pytest.mark.slow  # CI time: CI runs the five-node churn run; these kinds run at three nodes above
def test_five_nodes_under_kills_power_loss_and_partitions_of_every_shape_lose_nothing(tmp_path: Path) -> None:
    faults = ("kill-minority", "power-loss", "partition-halves", "partition-bridge", "pause-follower")
    _assert_valid(_run(tmp_path, 18, faults, 8.0, nodes=5))


def test_a_follower_with_a_flipped_bit_in_its_data_file_repairs_itself(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 14, ("corrupt-bitflip",), 1.0))


def test_a_follower_whose_data_file_is_cut_short_while_stopped_repairs_itself(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 14, ("corrupt-truncate",), 1.0))


@pytest.mark.skipif(disk_faults_possible() is not None, reason=f"{disk_faults_possible()}")
def test_a_full_disk_on_one_node_loses_no_acknowledged_record(tmp_path: Path) -> None:
    _assert_valid(_run(tmp_path, 7, ("disk-full",), 1.0))


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [3, 5, 7])
def test_many_seeded_runs_of_every_fault_kind_find_no_anomaly(tmp_path: Path, nodes: int) -> None:
    runs = int(os.environ.get("NEMESIS_RUNS", "100"))
    duration_s = float(os.environ.get("NEMESIS_DURATION_S", "60"))
    first = int(os.environ.get("NEMESIS_SEED", "1000"))
    results = [
        run_once(RunSettings(seed, duration_s, FAULT_KINDS, nodes), tmp_path / f"run-{seed}")
        for seed in range(first, first + runs)
    ]
    console = Console(width=200)
    console.print(runs_table(results))
    summary = summarize(results)
    console.print(summary_table(summary))
    console.print(summary_markdown(summary), markup=False)
    assert summary.failed_runs == 0, [r.check.problems() for r in results if not r.check.valid]
