"""``multiraft --help`` and ``--version``: quick (no node runtime imported), in one help style, quiet on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from multiraft.tools.cli import COMMANDS, app
from tests.cli._helpers import ROOT, run_cli

# What a simple command must not pay for: the node runtime, Raft, the nemesis, the storage engine.
_HEAVY = ("multiraft.node", "multiraft.raft", "multiraft.tools.nemesis", "multiraft.controller", "storage", "lmdb")


def _modules_after(*args: str) -> list[str]:
    """The heavy modules a ``multiraft ARGS`` run imported (run in a fresh interpreter)."""
    script = (
        "import json, sys\n"
        "sys.argv = ['multiraft', *json.loads(sys.argv[1])]\n"
        "from multiraft.tools.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"heavy = {_HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)], cwd=ROOT, capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    return list(json.loads(result.stdout.decode().strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("topic", "--help"), ("consume", "--help")])
def test_simple_commands_import_no_node_runtime_raft_or_nemesis(args: tuple[str, ...]) -> None:
    assert _modules_after(*args) == []


def test_the_root_help_summaries_are_the_commands_own() -> None:
    group = typer.main.get_group(app)
    for name, lazy in COMMANDS.items():
        command = lazy.load(name)
        assert command.help is not None, name
        first_paragraph = " ".join(command.help.split("\n\n")[0].split())
        assert lazy.help == first_paragraph, name
        assert group.get_command(typer.Context(group), name) is not None


def test_help_lists_every_command_without_importing_them() -> None:
    result = run_cli("--help", env={"COLUMNS": "200"})
    assert result.returncode == 0
    for name in COMMANDS:
        assert f" {name} " in result.stdout.decode()


@pytest.mark.parametrize("args", [("consume", "--help"), ("node", "drain", "--help"), ("topic", "create", "--help")])
def test_help_shows_no_type_after_flags_and_plain_argument_names(args: tuple[str, ...]) -> None:
    out = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}).stdout
    assert "<bool>" not in out
    assert "{" not in out.split("\n\n")[0] + out.splitlines()[1], out  # the usage line
    assert "╭─" in out  # rich panels, the node commands too


def test_node_subcommands_use_the_rich_help_of_the_others() -> None:
    out = CliRunner().invoke(app, ["node", "start", "--help"], env={"COLUMNS": "200"}).stdout
    assert "╭─ Configuration (override the file)" in out
    assert "--node-id" in out


def test_ctrl_c_while_starting_exits_130_without_a_traceback() -> None:
    script = (
        "import os, signal, sys, time\n"
        "sys.argv = ['multiraft', '--version']\n"
        "import multiraft.tools.cli\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"
        "print('not interrupted')\n"
    )
    env = {**os.environ}
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
        # A shell without job control starts children with SIGINT ignored; restore the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert result.returncode == 130, (result.stdout, result.stderr)
    assert b"Traceback" not in result.stderr
    assert b"not interrupted" not in result.stdout


def test_a_command_summary_wrapped_in_its_docstring_is_one_line_in_the_list() -> None:
    out = CliRunner().invoke(app, ["group", "--help"], env={"COLUMNS": "300"}).stdout
    delete_row = next(line for line in out.splitlines() if line.startswith("│ delete"))
    assert "a group with members is refused." in delete_row
