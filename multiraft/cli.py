"""The ``multiraft`` command."""

from __future__ import annotations

import typer

from multiraft import __version__

app = typer.Typer(help="multiraft: a Raft-replicated, partitioned message log.", no_args_is_help=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"multiraft {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """multiraft: a Raft-replicated, partitioned message log."""


def main() -> None:
    app()
