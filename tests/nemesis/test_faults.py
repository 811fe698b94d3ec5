"""Faults that cannot be injected or healed (seed 23052, five nodes): recorded, undone as far as they went, and
the run goes on. No node runs here: the cluster is a set of directories, and restarting nodes is stubbed."""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from multiraft import Admin
from multiraft.node.debug import CUTS_FILE
from multiraft.tools.launcher import ClusterInfo, NodeProcess
from multiraft.tools.nemesis import History, load_history
from multiraft.tools.nemesis.faults import Nemesis
from multiraft.tools.nemesis.runner import disk_faults_possible


def _cluster(root: Path, nodes: int = 5) -> ClusterInfo:
    cluster = ClusterInfo(str(root))
    for node_id in range(1, nodes + 1):
        directory = root / f"n{node_id}"
        (directory / "data").mkdir(parents=True)
        cluster.nodes[node_id] = NodeProcess(node_id, "-", "-", f"127.0.0.1:{7000 + node_id}", str(directory))
    return cluster


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    with History(tmp_path / "history.jsonl") as opened:
        yield opened


def _nemesis(
    cluster: ClusterInfo, history: History, monkeypatch: pytest.MonkeyPatch, disk_node: int | None = None
) -> Nemesis:
    monkeypatch.setattr(Nemesis, "_restart_stopped", lambda self: None)  # no node runs: none to restart
    monkeypatch.setattr("multiraft.tools.nemesis.faults.wait_serving", lambda *args, **kwargs: None)
    admin = cast(Admin, None)  # the faults used here never ask the cluster
    return Nemesis(cluster, admin, history, random.Random(23052), topic="t", disk_node=disk_node)


def _cuts(cluster: ClusterInfo, node_id: int) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((Path(cluster.nodes[node_id].directory) / "data" / CUTS_FILE).read_text())
    return loaded


def test_a_cut_that_cannot_reach_one_node_is_recorded_and_lifted_from_the_nodes_it_reached(
    tmp_path: Path, history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _cluster(tmp_path / "cluster")
    # Node 2's cuts file cannot be written (in the run: its data disk was full).
    data = Path(cluster.nodes[2].directory) / "data"
    data.rmdir()
    data.write_text("not a directory")
    nemesis = _nemesis(cluster, history, monkeypatch)

    assert nemesis.inject("partition-halves") is None
    nemesis.heal()
    nemesis.heal_all()  # does not raise: the run goes on to its final read and check

    events = load_history(history.path)
    assert [(e.type, e.f) for e in events if e.f == "fault"] == [("invoke", "fault"), ("fail", "fault")]
    assert any(e.f == "heal" and e.type == "fail" and e.value["kind"] == "all" for e in events)
    for node_id in (1, 3, 4, 5):  # none is left cut from its peers by the half-applied fault
        assert (_cuts(cluster, node_id)["drop_to"], _cuts(cluster, node_id)["drop_from"]) == ([], [])


def test_a_heal_that_cannot_lift_a_cut_on_one_node_is_recorded_and_lifts_it_on_the_others(
    tmp_path: Path, history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _cluster(tmp_path / "cluster")
    nemesis = _nemesis(cluster, history, monkeypatch)
    assert nemesis.inject("partition-halves") is not None
    cuts_file = Path(cluster.nodes[1].directory) / "data" / CUTS_FILE
    cuts_file.unlink()
    cuts_file.mkdir()  # node 1's cuts file can no longer be replaced

    nemesis.heal()

    heals = [e for e in load_history(history.path) if e.f == "heal" and e.type != "invoke"]
    assert [(e.type, e.value["kind"]) for e in heals] == [("fail", "partition-halves")]
    for node_id in (2, 3, 4, 5):
        assert (_cuts(cluster, node_id)["drop_to"], _cuts(cluster, node_id)["drop_from"]) == ([], [])


@pytest.mark.skipif(disk_faults_possible() is not None, reason="needs root to mount a small tmpfs")
def test_a_disk_full_fault_whose_last_chunk_half_fits_is_injected_and_its_filler_freed_by_the_heal(
    tmp_path: Path, history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _cluster(tmp_path / "cluster", 3)
    data = Path(cluster.nodes[2].directory) / "data"
    # Room for one chunk (1 MiB) and all of the next but one page: a buffered file kept that page's bytes and
    # raised ENOSPC again when closed, so the fault failed and its filler stayed for the rest of the run.
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={(2 << 20) - 4096}", "tmpfs", str(data)], check=True)
    try:
        nemesis = _nemesis(cluster, history, monkeypatch, disk_node=2)
        fault = nemesis.inject("disk-full")
        assert fault is not None and fault.nodes == (2,)
        assert (data / "nemesis-filler").stat().st_size == (2 << 20) - 4096
        nemesis.heal()
        assert not (data / "nemesis-filler").exists(), "the heal frees the disk"
        assert nemesis.inject("partition-oneway") is not None, "a later fault can write the node's cuts file"
    finally:
        subprocess.run(["umount", str(data)], check=False)


def test_a_run_whose_harness_fails_is_recorded_stopped_and_checked_as_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multiraft.tools.nemesis import runner

    stopped: list[str] = []

    def aborted(*args: object) -> tuple[list[int], None]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "cluster_up", lambda directory, *args, **kwargs: ClusterInfo(str(directory)))
    monkeypatch.setattr(runner, "_run", aborted)

    def kill_all_at_once(cluster: ClusterInfo) -> list[int]:
        stopped.append("killed")
        return []

    monkeypatch.setattr(runner, "kill_all_at_once", kill_all_at_once)
    monkeypatch.setattr(runner, "cluster_down", lambda directory: stopped.append("down"))
    monkeypatch.setattr(runner, "load_cluster", lambda directory: ClusterInfo(str(directory)))
    monkeypatch.setattr(runner, "compare_replicas", lambda *args: None)

    result = runner.run_once(runner.RunSettings(seed=23052, faults=("kill",)), tmp_path / "run")

    assert stopped == ["killed", "down"], "the cluster is still stopped"
    assert not result.check.valid and result.check.harness_errors == 1
    assert "No space left on device" in result.check.examples["harness_errors"][0]
