"""What the client commands share: how they find the cluster, how they fail, how they read arguments.

Every client command (``topic``, ``produce``, ``consume``, ``status``) takes the same connection options. The
bootstrap addresses come from the first of:

1. ``--bootstrap HOST:PORT[,HOST:PORT]`` or ``MULTIRAFT_BOOTSTRAP``;
2. ``--cluster-dir DIR`` or ``MULTIRAFT_CLUSTER_DIR``: a directory made by ``multiraft cluster up --dir DIR``
   (its ``cluster.json`` records every node's client address).

A local cluster listens on free ports chosen when it starts, so there is no fixed default address.

A cluster with authentication wants credentials: ``multiraft --user NAME [--password-file FILE] ...`` (or
``MULTIRAFT_USER`` and ``MULTIRAFT_PASSWORD_FILE``); without a password file the password is asked for.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypedDict

import typer

from multiraft.errors import MultiraftError

if TYPE_CHECKING:
    from rpc.client import Admin

__all__ = [
    "BootstrapOption",
    "ClusterDirOption",
    "TimeoutOption",
    "bootstrap_addresses",
    "fail",
    "open_admin",
    "credentials",
    "read_password",
    "unescape",
]

_PANEL = "Connection"

BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="MULTIRAFT_BOOTSTRAP",
        metavar="HOST:PORT[,HOST:PORT]",
        help="Addresses of one or more nodes.",
        rich_help_panel=_PANEL,
    ),
]
ClusterDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cluster-dir",
        envvar="MULTIRAFT_CLUSTER_DIR",
        file_okay=False,
        help="A local cluster's directory (`multiraft cluster up --dir`); used when no --bootstrap is given.",
        rich_help_panel=_PANEL,
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="Seconds to wait for each request.", rich_help_panel=_PANEL),
]


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, then exit ``code``."""
    print(f"error: {one_line(message)}", file=sys.stderr)
    raise typer.Exit(code)


def one_line(text: str) -> str:
    return " ".join(text.split())


def describe_error(exc: BaseException) -> str:
    """What an operator reads: the message, and the stable reason of a multiraft error."""
    if isinstance(exc, MultiraftError):
        return one_line(f"{exc.message} ({exc.reason})")
    return one_line(str(exc) or type(exc).__name__)


def bootstrap_addresses(bootstrap: str | None, cluster_dir: Path | None) -> str:
    if bootstrap:
        return bootstrap
    if cluster_dir is not None:
        from multiraft.launcher import load_cluster

        return load_cluster(cluster_dir).bootstrap
    fail(
        "no cluster given: pass --bootstrap HOST:PORT[,HOST:PORT], set MULTIRAFT_BOOTSTRAP, or point --cluster-dir "
        "(MULTIRAFT_CLUSTER_DIR) at a directory made by `multiraft cluster up --dir`"
    )


def open_admin(bootstrap: str | None, cluster_dir: Path | None, timeout_s: float) -> Admin:
    from rpc.client import Admin

    return Admin(bootstrap_addresses(bootstrap, cluster_dir), request_timeout_s=timeout_s, **credentials())


def read_password(path: str | None, prompt: str, *, confirm: bool = False) -> str:
    """The first line of ``path``, or typed at a prompt (twice with ``confirm``); never echoed or logged."""
    if path:
        try:
            with Path(path).open(encoding="utf-8") as file:
                password = file.readline().rstrip("\r\n")
        except OSError as exc:
            fail(f"cannot read the password file {path}: {exc.strerror}")
    else:
        password = getpass.getpass(prompt)
        if confirm and getpass.getpass("again: ") != password:
            fail("the passwords differ")
    if not password:
        fail("the password is empty")
    return password


class Credentials(TypedDict, total=False):
    user: str
    password: str


def credentials() -> Credentials:
    """``user``/``password`` keyword arguments of a client, from ``--user``/``--password-file`` (or the
    variables), asking for the password when no file is given; empty without a user."""
    from multiraft.cli._common import state

    user = state.user or os.environ.get("MULTIRAFT_USER")
    if not user:
        return Credentials()
    path = state.password_file or os.environ.get("MULTIRAFT_PASSWORD_FILE")
    if state.password is None:
        state.password = read_password(path, f"password of {user}: ")
    return Credentials(user=user, password=state.password)


def unescape(text: str) -> bytes:
    """``\\t`` typed on a command line is a tab (also ``\\n``, ``\\r``, ``\\0`` and ``\\\\``)."""
    escapes = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\"}
    return re.sub(r"\\([tnr0\\])", lambda match: escapes[match.group(1)], text).encode("utf-8")


def silence_stdout() -> None:
    """After the reader of stdout went away (``| head``), send what Python still flushes at exit nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
