"""Saving a benchmark's result: the JSON that docs/benchmarks.md and benchmarks/plots.py read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def save_json(result: dict[str, Any], out: Path | None) -> None:
    """Write ``result`` to ``out`` as indented JSON (nothing when ``out`` is None), creating its directory."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


def emit(result: dict[str, Any], out: Path | None, *, compact: bool) -> None:
    """Save ``result`` (see :func:`save_json`) and print it on stdout: one line when ``compact`` (``--json``)."""
    save_json(result, out)
    print(json.dumps(result, indent=None if compact else 2))
