"""rpk-style format strings for ``produce --input-format``: what each input line holds (``%k %v``, ...).

The output side (``consume --format '%k %v'``) is :func:`multiraft.tools.cli._consume.format_string_formatter`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import typer

from multiraft.tools.cli._options import unescape

__all__ = ["ParsedRecord", "format_string_parser"]

_DIRECTIVES = {b"k": "key", b"v": "value", b"h": "headers", b"T": "timestamp", b"p": "partition"}

ParsedRecord = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None, int | None]
"""Key, value, headers, timestamp [ms] and partition of one input record (None: the line does not give it)."""


def format_string_parser(fmt: str) -> Callable[[bytes, list[tuple[str, bytes]]], ParsedRecord]:
    """A parser of the input lines ``fmt`` describes: ``%k`` key, ``%v`` value, ``%h`` headers as
    ``name=value`` pairs joined by ``,``, ``%T`` timestamp [ms], ``%p`` partition, ``%%`` a percent sign; any
    other text must stand in the line as written (``\\t`` and the like are unescaped; a final ``\\n`` is the
    record delimiter and is dropped). Each field but the last takes the shortest text up to what follows it.

    Raises :class:`typer.BadParameter` for an unknown or repeated directive and for a format without ``%v``;
    the parser raises ValueError saying what is wrong with a line (the extra headers are added to each)."""
    raw = unescape(fmt)
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    pattern = bytearray(b"^")
    names: list[bytes] = []
    i = 0
    while i < len(raw):
        if raw[i : i + 1] != b"%":
            pattern += re.escape(raw[i : i + 1])
            i += 1
            continue
        directive = raw[i + 1 : i + 2]
        i += 2
        if directive == b"%":
            pattern += b"%"
        elif directive in _DIRECTIVES and directive not in names:
            names.append(directive)
            pattern += b"(?P<" + _DIRECTIVES[directive].encode() + b">.*?)"
        else:
            known = " ".join(f"%{d.decode()}" for d in _DIRECTIVES)
            what = "repeated" if directive in names else "unknown"
            raise typer.BadParameter(
                f"{what} directive %{directive.decode(errors='replace')}; known: {known} %%",
                param_hint="--input-format",
            )
    if b"v" not in names:
        raise typer.BadParameter("a record needs its value: put %v in the format", param_hint="--input-format")
    matcher = re.compile(bytes(pattern) + b"$", re.DOTALL)

    def parse(line: bytes, extra_headers: list[tuple[str, bytes]]) -> ParsedRecord:
        found = matcher.match(line)
        if found is None:
            raise ValueError(f"it does not have the shape {fmt!r}")
        fields: dict[str, bytes | None] = found.groupdict()
        headers = list(extra_headers)
        for pair in (fields.get("headers") or b"").split(b","):
            if pair:
                header, sep, value = pair.partition(b"=")
                if not sep:
                    raise ValueError(f"header {pair.decode(errors='replace')!r} is not name=value")
                headers.append((header.decode(errors="replace"), value))
        numbers: dict[str, int | None] = {}
        for name in ("timestamp", "partition"):
            text = fields.get(name)
            if text is not None and not text.strip().isdigit():
                raise ValueError(f"the {name} {text.decode(errors='replace')!r} is not a whole number")
            numbers[name] = int(text) if text is not None else None
        return fields.get("key"), fields.get("value"), headers, numbers["timestamp"], numbers["partition"]

    return parse
