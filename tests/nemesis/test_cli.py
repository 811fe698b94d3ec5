"""``multiraft nemesis``: checks a history file again, and refuses what it cannot run (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from multiraft.tools.cli import app
from multiraft.tools.nemesis import History

_runner = CliRunner()


def _history(path: Path, *, lost: bool) -> Path:
    with History(path) as history:
        history.record("producer-0", "invoke", "send", key="k0", value="producer-0:0")
        history.record("producer-0", "ok", "send", key="k0", value="producer-0:0", partition=0, offset=0)
        history.record("runner", "ok", "heal-all")
        history.record("producer-0", "invoke", "send", key="k0", value="producer-0:1")
        history.record("producer-0", "ok", "send", key="k0", value="producer-0:1", partition=0, offset=1)
        rows = [[0, 1, "k0", "producer-0:1"]] if lost else [[0, 0, "k0", "producer-0:0"], [0, 1, "k0", "producer-0:1"]]
        history.record("final", "ok", "final-read", rows=rows, positions={"0": 2})
        history.record("runner", "ok", "replicas", compared=1, divergent=[])
    return path


def test_check_reports_a_lost_record_of_a_history_file_and_exits_1(tmp_path: Path) -> None:
    result = _runner.invoke(app, ["nemesis", "--check", str(_history(tmp_path / "h.jsonl", lost=True))])
    assert result.exit_code == 1, result.output
    assert "lost: 1" in result.output and "producer-0:0" in result.output


def test_check_of_a_clean_history_file_says_ok(tmp_path: Path) -> None:
    result = _runner.invoke(app, ["nemesis", "--check", str(_history(tmp_path / "h.jsonl", lost=False))])
    assert (result.exit_code, result.output.strip()) == (0, "ok")


def test_an_unknown_fault_kind_is_refused_before_any_cluster_starts(tmp_path: Path) -> None:
    result = _runner.invoke(app, ["nemesis", "--faults", "kill,meteor", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "meteor" in result.output
    assert not any(tmp_path.iterdir())
