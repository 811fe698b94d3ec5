"""The ``multiraft`` command: one typer app, one sub-app per concern.

Errors from our packages print one line on stderr and exit non-zero; ``--debug`` shows the traceback. A
multiraft error names its stable reason: ``error: unknown topic 'x' (UNKNOWN_TOPIC)``. Usage errors exit 2.
Ctrl-C exits 130 without a traceback, also while the command is still starting.

Subcommands are imported when they run (:data:`COMMANDS`): ``multiraft --version``, ``--help`` and a client
command never import the node runtime, Raft or the nemesis.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ctrl-C while the command is still importing: exit 130 quietly (main() restores KeyboardInterrupt). Only when
# this process is the command (``multiraft ...`` or ``python -m multiraft.tools.cli``), not a test importing it.
if sys.argv and (sys.argv[0] == "-m" or Path(sys.argv[0]).name == "multiraft"):
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))

import typer
from typer import _click as click  # typer (>=0.29) runs on its own copy of click
from typer.core import TyperCommand, TyperGroup

from multiraft import __version__
from multiraft.tools.cli import _help_style
from multiraft.tools.cli._common import state

__all__ = ["app", "main", "COMMANDS", "LazyCommand"]

_help_style.apply()


@dataclass(frozen=True)
class LazyCommand:
    """A subcommand imported only when it runs: ``module.attribute`` is a typer app or a command function;
    ``help`` is its one-line summary in ``multiraft --help`` (a test keeps the two equal)."""

    module: str
    attribute: str
    help: str

    def load(self, name: str) -> click.Command:
        target: Any = getattr(importlib.import_module(self.module), self.attribute)
        if isinstance(target, typer.Typer):
            command: click.Command = typer.main.get_group(target)
        else:  # a function: a one-command app gives its command
            single = typer.Typer()
            single.command(name)(target)
            command = typer.main.get_command(single)
        command.name = name
        return command


COMMANDS: dict[str, LazyCommand] = {
    "topic": LazyCommand("multiraft.tools.cli._topic", "topic_app", "Create, list, describe, delete and alter topics."),
    "group": LazyCommand(
        "multiraft.tools.cli._consumer_group",
        "group_app",
        "List, describe and delete consumer groups; reset their committed offsets.",
    ),
    "produce": LazyCommand(
        "multiraft.tools.cli._produce",
        "produce",
        "Write one record per line of stdin (or --file), then print a summary on stderr.",
    ),
    "consume": LazyCommand(
        "multiraft.tools.cli._consume",
        "consume",
        "Print records of a topic on stdout, one per line; exit 0 at the end, 130 on Ctrl-C.",
    ),
    "status": LazyCommand(
        "multiraft.tools.cli._status",
        "status",
        "Nodes, the controller leader, every partition (leader, replicas, ISR, lag), replica moves in flight "
        "(bytes copied, ETA) and consumer-group lag.",
    ),
    "health": LazyCommand(
        "multiraft.tools.cli._health",
        "health",
        "Is the cluster healthy? Nodes down, leaderless and under-replicated partitions; --watch to follow.",
    ),
    "cluster": LazyCommand(
        "multiraft.tools.cli._cluster",
        "cluster_app",
        "Local clusters on 127.0.0.1 (data, logs and PIDs under --dir); `cluster config`: cluster-wide settings.",
    ),
    "storage": LazyCommand(
        "multiraft.tools.cli._storage",
        "storage_app",
        "Check and repair a node's log store (run while the node is stopped).",
    ),
    "bench": LazyCommand(
        "multiraft.tools.cli._bench",
        "bench_app",
        "Measure a cluster with the public client: produce and consume throughput, latency.",
    ),
    "nemesis": LazyCommand(
        "multiraft.tools.cli._nemesis",
        "nemesis",
        "Run seeded nemesis runs (faults while idempotent producers, consumers, a group and an admin work), "
        "check each history, print a table; exit 1 if any run found an anomaly.",
    ),
    "user": LazyCommand(
        "multiraft.tools.cli._security",
        "user_app",
        "SCRAM-SHA-256 users (the cluster keeps salted verifiers, never passwords).",
    ),
    "acl": LazyCommand(
        "multiraft.tools.cli._security",
        "acl_app",
        "ACLs: who may do what on which topics, groups and the cluster (deny wins).",
    ),
    "gossip": LazyCommand(
        "multiraft.tools.cli._gossip",
        "gossip_app",
        "Keys of the encrypted gossip between nodes (see docs/security.md).",
    ),
    "node": LazyCommand(
        "multiraft.tools.cli._node",
        "node_app",
        "Run a node, print its configuration reference, or drain and remove one.",
    ),
}


class _Placeholder(TyperCommand):
    """Stands for a lazy subcommand in the root's help until it is run."""


class _LazyGroup(TyperGroup):
    """The root group: placeholders for help and typo suggestions, the real command imported on use."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, lazy in COMMANDS.items():
            self.add_command(_Placeholder(name, help=lazy.help, short_help=lazy.help), name)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Placeholder) and not ctx.resilient_parsing:
            command = self.commands[cmd_name] = COMMANDS[cmd_name].load(cmd_name)
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing the commands must not import them: the help reads the placeholders.
        resilient, ctx.resilient_parsing = ctx.resilient_parsing, True
        try:
            super().format_help(ctx, formatter)
        finally:
            ctx.resilient_parsing = resilient


app = typer.Typer(
    cls=_LazyGroup,
    help="multiraft: a Raft-replicated, partitioned message log.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"multiraft {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logs."),
    log_json: bool = typer.Option(False, "--log-json", help="Write logs to stderr as JSON lines."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    user: str | None = typer.Option(
        None, "--user", envvar="MULTIRAFT_USER", help="Authenticate as this SCRAM-SHA-256 user."
    ),
    password_file: str | None = typer.Option(
        None,
        "--password-file",
        envvar="MULTIRAFT_PASSWORD_FILE",
        help="File whose first line is the --user's password (default: ask for it).",
    ),
) -> None:
    """multiraft: a Raft-replicated, partitioned message log."""
    from multiraft.logging import configure_logging

    state.debug = debug
    state.user, state.password_file = user, password_file
    # Client commands print results, not the client library's info logs: warnings and up unless asked.
    # (``node start`` configures logging again from its own config.)
    level = "debug" if debug else os.environ.get("MULTIRAFT_LOG_LEVEL") or "warning"
    configure_logging(level, json=log_json or None)


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        command = typer.main.get_group(app)
        result = command(standalone_mode=False)
        if isinstance(result, int) and result:  # without standalone mode click returns an Exit's code
            sys.exit(result)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (click.ClickException, typer.TyperException) as exc:  # usage errors
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(130)
    except Exception as exc:  # the one place that turns an error into an exit status
        if state.debug:
            raise
        from multiraft.tools.cli._options import describe_error

        print(f"error: {describe_error(exc)}", file=sys.stderr)
        sys.exit(1)
