"""Running the ``multiraft`` command as an operator runs it (a subprocess) or in-process, and checking its output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner, Result

from multiraft.tools.cli import app

ROOT = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str,
    bootstrap: str | None = None,
    stdin: bytes | None = None,
    timeout_s: float = 60,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m multiraft.tools.cli ARGS`` with the cluster in MULTIRAFT_BOOTSTRAP; stdout and stderr as bytes."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MULTIRAFT_")}
    if bootstrap is not None:
        environment["MULTIRAFT_BOOTSTRAP"] = bootstrap
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "multiraft.tools.cli", *args],
        cwd=ROOT,
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=timeout_s,
        env=environment,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    """stdout of a run that must have succeeded (the failure message shows both streams)."""
    assert result.returncode == 0, (result.returncode, result.stdout.decode(), result.stderr.decode())
    return result.stdout.decode()


def one_error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    """The single stderr line of a run that must have failed with exit 1 and no traceback."""
    stderr = result.stderr.decode()
    assert result.returncode == 1, (result.returncode, result.stdout.decode(), stderr)
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


_runner = CliRunner()


def invoke(*args: str, bootstrap: str, stdin: bytes | None = None) -> Result:
    """The same command in this process (faster than a subprocess; no ``main()`` error mapping)."""
    return _runner.invoke(app, list(args), input=stdin, env={"MULTIRAFT_BOOTSTRAP": bootstrap})


def invoked(result: Result) -> str:
    """stdout of an in-process run that must have succeeded."""
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result.stdout
