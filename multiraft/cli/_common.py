"""Shared bits of the CLI: global flags and the rich consoles."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console


@dataclass
class _State:
    debug: bool = False


state = _State()
console = Console()
err_console = Console(stderr=True)
