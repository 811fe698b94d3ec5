"""What the client commands share: how they find the cluster, how they fail, how they read arguments.

Every client command (``topic``, ``produce``, ``consume``, ``status``) takes the same connection options. The
bootstrap addresses come from the first of:

1. ``--bootstrap HOST:PORT[,HOST:PORT]`` or ``MULTIRAFT_BOOTSTRAP``;
2. ``--cluster-dir DIR`` or ``MULTIRAFT_CLUSTER_DIR``: a directory made by ``multiraft cluster up --dir DIR``
   (its ``cluster.json`` records every node's client address).

A local cluster listens on free ports chosen when it starts, so there is no fixed default address.

TLS (:func:`with_tls_options`, :func:`client_tls`): ``--tls-ca PEM`` (``MULTIRAFT_TLS_CA``) makes the client
speak TLS and check the nodes' certificates against that CA; ``--tls-cert`` and ``--tls-key``
(``MULTIRAFT_TLS_CERT``, ``MULTIRAFT_TLS_KEY``) present a client certificate. Without them, a ``--cluster-dir``
started with ``--secure`` supplies its own (``DIR/tls``).

A cluster with authentication wants credentials: ``multiraft --user NAME [--password-file FILE] ...`` (or
``MULTIRAFT_USER`` and ``MULTIRAFT_PASSWORD_FILE``); without a password file the password is asked for.
"""

from __future__ import annotations

import functools
import getpass
import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypedDict, TypeVar

import typer

from multiraft.errors import MultiraftError

if TYPE_CHECKING:
    from multiraft import Admin, TlsSettings

__all__ = [
    "BootstrapOption",
    "ClusterDirOption",
    "TimeoutOption",
    "bootstrap_addresses",
    "client_tls",
    "remember_tls",
    "with_tls_options",
    "count",
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


_TLS_OPTIONS = {
    "tls_ca": typer.Option(
        "--tls-ca",
        envvar="MULTIRAFT_TLS_CA",
        metavar="PEM",
        help="Speak TLS; trust the nodes' certificates signed by this CA bundle.",
        rich_help_panel=_PANEL,
    ),
    "tls_cert": typer.Option(
        "--tls-cert",
        envvar="MULTIRAFT_TLS_CERT",
        metavar="PEM",
        help="Client certificate to present (its subject is the principal); needs --tls-key.",
        rich_help_panel=_PANEL,
    ),
    "tls_key": typer.Option(
        "--tls-key", envvar="MULTIRAFT_TLS_KEY", metavar="PEM", help="Key of --tls-cert.", rich_help_panel=_PANEL
    ),
}
_tls_given: dict[str, str] = {}  # one command runs per process: what its TLS options said

Command = TypeVar("Command", bound=Callable[..., Any])


def remember_tls(name: str, value: str | None) -> None:
    """Record a TLS option (``tls_ca``, ``tls_cert``, ``tls_key``) for :func:`client_tls`."""
    if value:
        _tls_given[name] = value


def with_tls_options(command: Command) -> Command:
    """Give a client command ``--tls-ca``, ``--tls-cert`` and ``--tls-key`` (read by :func:`client_tls`)."""
    signature = inspect.signature(command, eval_str=True)
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[str | None, option])
        for name, option in _TLS_OPTIONS.items()
    ]

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        for name in _TLS_OPTIONS:
            remember_tls(name, kwargs.pop(name, None))
        return command(*args, **kwargs)

    run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *extra])  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]


def client_tls(cluster_dir: Path | None = None) -> TlsSettings | None:
    """The TLS settings the command's options give; else a secure ``cluster_dir``'s; else None (plaintext)."""
    from multiraft import TlsSettings

    if _tls_given:
        if ("tls_cert" in _tls_given) != ("tls_key" in _tls_given):
            fail("--tls-cert and --tls-key go together (MULTIRAFT_TLS_CERT, MULTIRAFT_TLS_KEY)", 2)
        return TlsSettings(_tls_given.get("tls_ca", ""), _tls_given.get("tls_cert", ""), _tls_given.get("tls_key", ""))
    if cluster_dir is not None:
        from multiraft.tools.launcher import load_cluster

        tls = load_cluster(cluster_dir).tls
        if tls:
            return TlsSettings(tls["ca_file"], tls["cert_file"], tls["key_file"])
    return None


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, then exit ``code``."""
    print(f"error: {one_line(message)}", file=sys.stderr)
    raise typer.Exit(code)


def count(number: int, noun: str) -> str:
    """``1 record``, ``2 records``: a number and its noun, singular for one."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def one_line(text: str) -> str:
    return " ".join(text.split())


def describe_error(exc: BaseException) -> str:
    """What an operator reads: the message, and the stable reason of a multiraft error."""
    if isinstance(exc, MultiraftError):
        return one_line(f"{exc.message} ({exc.reason})")
    return one_line(str(exc) or type(exc).__name__)


def bootstrap_addresses(bootstrap: str | None, cluster_dir: Path | None) -> str:
    """The addresses to bootstrap from; a malformed --bootstrap is a usage error (exit 2)."""
    if bootstrap:
        from rpc.client._cluster import parse_bootstrap

        try:
            parse_bootstrap(bootstrap)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--bootstrap / -b") from exc
        return bootstrap
    if cluster_dir is not None:
        from multiraft.tools.launcher import load_cluster

        return load_cluster(cluster_dir).bootstrap
    fail(
        "no cluster given: pass --bootstrap HOST:PORT[,HOST:PORT], set MULTIRAFT_BOOTSTRAP, or point --cluster-dir "
        "(MULTIRAFT_CLUSTER_DIR) at a directory made by `multiraft cluster up --dir`"
    )


def open_admin(bootstrap: str | None, cluster_dir: Path | None, timeout_s: float) -> Admin:
    from multiraft import Admin

    return Admin(
        bootstrap_addresses(bootstrap, cluster_dir),
        request_timeout_s=timeout_s,
        tls=client_tls(cluster_dir),
        **credentials(cluster_dir),
    )


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


def credentials(cluster_dir: Path | None = None) -> Credentials:
    """``user``/``password`` keyword arguments of a client, from ``--user``/``--password-file`` (or the
    variables; else a secure ``cluster_dir``'s admin), asking for the password when no file is given; empty
    without a user."""
    from multiraft.tools.cli._common import state

    user = state.user or os.environ.get("MULTIRAFT_USER")
    path = state.password_file or os.environ.get("MULTIRAFT_PASSWORD_FILE")
    if not user and cluster_dir is not None:  # a secure local cluster brings its admin
        from multiraft.tools.launcher import load_cluster

        tls = load_cluster(cluster_dir).tls
        user, path = tls.get("user"), tls.get("password_file")
    if not user:
        return Credentials()
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
