"""The ``multiraft`` command: one typer app, one sub-app per concern.

Errors from our packages print one line on stderr and exit non-zero; ``--debug`` shows the traceback. A
multiraft error names its stable reason: ``error: unknown topic 'x' (UNKNOWN_TOPIC)``. Ctrl-C exits 130.
"""

from __future__ import annotations

import os
import sys

import click
import typer

from multiraft import __version__
from multiraft.cli._bench import bench_app
from multiraft.cli._cluster import cluster_app
from multiraft.cli._common import state
from multiraft.cli._consume import consume
from multiraft.cli._gossip import gossip_app
from multiraft.cli._group import group_app
from multiraft.cli._nemesis import nemesis
from multiraft.cli._options import describe_error
from multiraft.cli._produce import produce
from multiraft.cli._security import acl_app, user_app
from multiraft.cli._status import status
from multiraft.cli._storage import storage_app
from multiraft.cli._topic import topic_app
from multiraft.logging import configure_logging

__all__ = ["app", "main"]

app = typer.Typer(
    help="multiraft: a Raft-replicated, partitioned message log.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(topic_app, name="topic")
app.add_typer(group_app, name="group")
app.command("produce")(produce)
app.command("consume")(consume)
app.command("status")(status)
app.add_typer(storage_app, name="storage")
app.add_typer(cluster_app, name="cluster")
app.add_typer(bench_app, name="bench")
app.command("nemesis")(nemesis)
app.add_typer(user_app, name="user")
app.add_typer(acl_app, name="acl")
app.add_typer(gossip_app, name="gossip")


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
    state.debug = debug
    state.user, state.password_file = user, password_file
    # Client commands print results, not the client library's info logs: warnings and up unless asked.
    # (``node start`` configures logging again from its own config.)
    level = "debug" if debug else os.environ.get("MULTIRAFT_LOG_LEVEL") or "warning"
    configure_logging(level, json=log_json or None)


def main() -> None:
    from multiraft.cli._node import node_group

    command = typer.main.get_group(app)
    command.add_command(node_group)  # type: ignore[arg-type]  # typer groups take plain click commands
    try:
        result = command(standalone_mode=False)
        if isinstance(result, int) and result:  # without standalone mode click returns an Exit's code
            sys.exit(result)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (click.ClickException, typer.TyperException) as exc:  # usage errors (typer vendors its own click)
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.exit(130)
    except Exception as exc:  # the one place that turns an error into an exit status
        if state.debug:
            raise
        print(f"error: {describe_error(exc)}", file=sys.stderr)
        sys.exit(1)
