"""How ``--help`` reads: the conventions of rpk, kcat and most Unix tools rather than typer 0.29's own.

typer 0.29 prints a type after every option, ``<bool>`` after plain flags too, and writes a required
argument as ``{TOPIC}`` in the usage line. A flag takes no value, so it shows none; a required argument is
plain ``TOPIC`` and an optional one ``[TOPIC]``. (typer has no setting for either; these two small overrides
are tested by ``tests/cli/test_help.py``.)
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption

__all__ = ["apply"]


def _option_type(self: TyperOption, ctx: Any) -> str | None:
    if self.is_flag and not self.count:
        return None  # a flag takes no value
    return _original_option_type(self, ctx)


def _usage_name(self: TyperArgument) -> str:
    name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
    return f"{name}..." if self.nargs != 1 else name


_original_option_type = TyperOption.display_type_rich  # kept once, so apply() may run twice


def apply() -> None:
    """Install both overrides (idempotent)."""
    TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign]
