"""``multiraft nemesis``: checks a history file again, and refuses what it cannot run (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from multiraft.tools.cli import app
from multiraft.tools.nemesis import CheckResult, History, RunResult, RunSettings

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


def test_a_run_that_aborts_is_counted_failed_with_why_and_the_batch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run_once(settings: RunSettings, directory: Path) -> RunResult:
        if settings.seed == 23052:
            raise OSError(28, "No space left on device")
        return RunResult(settings, directory, CheckResult(final_read_complete=True, recovery_s=0.5), 1.0)

    monkeypatch.setattr("multiraft.tools.cli._nemesis.run_once", run_once)
    result = _runner.invoke(app, ["nemesis", "--runs", "3", "--seed", "23051", "--faults", "kill", "--markdown",
                                  "--dir", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 1, result.output
    output = "".join(result.output.split())  # the console wraps long lines
    assert "seed23053:ok" in output, "the runs after the aborted one still run"
    assert "seed23052:FAILED:harness_errors:1" in output and "Nospaceleftondevice" in output
    assert "|3|1|" in output, "the table is printed, the aborted run counted failed"
