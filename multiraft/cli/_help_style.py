"""How ``--help`` and usage errors read: the conventions of rpk, kcat and most Unix tools rather than typer
0.29's own.

typer 0.29 prints a type after every option, ``<bool>`` after plain flags too, and writes a required
argument as ``{TOPIC}`` in the usage line, and keeps a docstring's line breaks in a list of commands. A flag
takes no value, so it shows none; a required argument is plain ``TOPIC`` and an optional one ``[TOPIC]``; a
summary is one line of text. typer 0.29 also checks values with pydantic and shows its
text (``Value error, 'avro' is not one of ...``, ``Input should be greater than or equal to 0``); an operator
reads ``'avro' is not one of ...`` and ``must be 0 or more, not -1``. (typer has no setting for any of these;
the small overrides below are tested by ``tests/cli/test_help.py``.)
"""

from __future__ import annotations

import inspect
from typing import Any

import typer._coercion
import typer._param_types
import typer.rich_utils
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


_BOUNDS = {
    "greater_than_equal": ("ge", "must be {} or more"),
    "greater_than": ("gt", "must be more than {}"),
    "less_than_equal": ("le", "must be {} or less"),
    "less_than": ("lt", "must be less than {}"),
}
_PARSING = {"int_parsing": "an integer", "float_parsing": "a number", "bool_parsing": "true or false"}


def validation_message(exc: Any) -> str:
    """A pydantic ``ValidationError``'s first error as an operator reads it."""
    errors = exc.errors()
    if not errors:
        return str(exc)
    error = errors[0]
    kind, given, context = error.get("type", ""), error.get("input"), error.get("ctx") or {}
    if kind in _BOUNDS:
        key, text = _BOUNDS[kind]
        return f"{text.format(context.get(key))}, not {given}"
    if kind in _PARSING:
        return f"{given!r} is not {_PARSING[kind]}"
    message = str(error.get("msg", exc))
    return message.removeprefix("Value error, ").rstrip(".")


_original_command_help = typer.rich_utils._make_command_help


def _command_summary(*, help_text: str, markup_mode: Any) -> Any:
    # A docstring's first paragraph wraps in the source; in a list of commands it is one line of text.
    first, _, rest = inspect.cleandoc(help_text).partition("\n\n")
    unwrapped = " ".join(first.split()) + ("\n\n" + rest if rest else "")
    return _original_command_help(help_text=unwrapped, markup_mode=markup_mode)


def apply() -> None:
    """Install the overrides (idempotent)."""
    typer.rich_utils._make_command_help = _command_summary
    typer._coercion.get_error_msg = validation_message  # type: ignore[attr-defined]
    typer._param_types.get_error_msg = validation_message  # type: ignore[attr-defined]
    TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign]
