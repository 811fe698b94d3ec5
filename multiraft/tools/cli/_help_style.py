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

import importlib
import inspect
from typing import Any

from typer.core import TyperArgument, TyperGroup, TyperOption

__all__ = ["apply"]


def _option_type(self: TyperOption, ctx: Any) -> str | None:
    if self.is_flag and not self.count:
        return None  # a flag takes no value
    return _original_option_type(self, ctx) if _original_option_type is not None else None


def _usage_name(self: TyperArgument) -> str:
    name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
    return f"{name}..." if self.nargs != 1 else name


_original_option_type = getattr(TyperOption, "display_type_rich", None)  # kept once: apply() may run twice


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


def _unwrapped_summaries(make_command_help: Any) -> Any:
    def command_summary(*, help_text: str, markup_mode: Any) -> Any:
        # A docstring's first paragraph wraps in the source; in a list of commands it is one line of text.
        first, _, rest = inspect.cleandoc(help_text).partition("\n\n")
        unwrapped = " ".join(first.split()) + ("\n\n" + rest if rest else "")
        return make_command_help(help_text=unwrapped, markup_mode=markup_mode)

    command_summary.unwrapped = True  # type: ignore[attr-defined]
    return command_summary


_original_group_help = TyperGroup.format_help


def _group_help(self: TyperGroup, ctx: Any, formatter: Any) -> None:
    # typer imports rich_utils (and rich) only to draw help: patch it then, not when every command starts.
    rich_utils = importlib.import_module("typer.rich_utils")
    current = getattr(rich_utils, "_make_command_help", None)
    if current is not None and not getattr(current, "unwrapped", False):
        setattr(rich_utils, "_make_command_help", _unwrapped_summaries(current))  # noqa: B010 - typed module
    _original_group_help(self, ctx, formatter)


def _patch(module_name: str, attribute: str, value: object) -> None:
    """Replace ``module.attribute`` where this typer has it (another version renders its own way)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return
    if hasattr(module, attribute):
        setattr(module, attribute, value)


def apply() -> None:
    """Install the overrides (idempotent)."""
    _patch("typer._coercion", "get_error_msg", validation_message)
    _patch("typer._param_types", "get_error_msg", validation_message)
    TyperGroup.format_help = _group_help  # type: ignore[method-assign]
    if hasattr(TyperOption, "display_type_rich"):
        TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    if hasattr(TyperArgument, "_usage_display_name"):
        TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign]
