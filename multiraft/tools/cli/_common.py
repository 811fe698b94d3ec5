"""Shared bits of the CLI: global flags and the rich consoles (made on first use: rich takes time to import,
and ``multiraft --version`` needs none)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    err_console: Console


@dataclass
class _State:
    debug: bool = False
    user: str | None = None  # --user / MULTIRAFT_USER: SCRAM-SHA-256 credentials of every client command
    password_file: str | None = None  # --password-file / MULTIRAFT_PASSWORD_FILE; absent: a prompt
    password: str | None = field(default=None, repr=False)  # read once, when a client is opened


state = _State()


@functools.cache
def _console(stderr: bool) -> Console:
    from rich.console import Console

    return Console(stderr=stderr)


def __getattr__(name: str) -> Any:
    if name == "console":
        return _console(False)
    if name == "err_console":
        return _console(True)
    raise AttributeError(name)
