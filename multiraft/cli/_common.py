"""Shared bits of the CLI: global flags and the rich consoles."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console


@dataclass
class _State:
    debug: bool = False
    user: str | None = None  # --user / MULTIRAFT_USER: SCRAM-SHA-256 credentials of every client command
    password_file: str | None = None  # --password-file / MULTIRAFT_PASSWORD_FILE; absent: a prompt
    password: str | None = field(default=None, repr=False)  # read once, when a client is opened


state = _State()
console = Console()
err_console = Console(stderr=True)
