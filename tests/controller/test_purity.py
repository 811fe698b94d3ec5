"""The controller is pure: it imports only the standard library's computation modules and itself.

apply() runs on every replica and must decide the same thing everywhere, so nothing in the package may
read a clock, draw random numbers, touch files or the network, or start threads.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import multiraft.controller as controller

PACKAGE = Path(controller.__file__).resolve().parent
ALLOWED_STDLIB = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "functools",
    "itertools",
    "json",
    "math",
    "re",
    "struct",
    "typing",
    "zlib",
}


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_the_controller_imports_only_pure_standard_modules_and_itself(path: Path) -> None:
    for lineno, module in _imported_modules(path):
        if module.startswith((".", "multiraft.controller")) or module == "storage.binary":
            continue  # storage.binary: the pure leaf of binary primitives every hand-written codec uses
        top = module.split(".")[0]
        assert top in sys.stdlib_module_names and top in ALLOWED_STDLIB, f"{path.name}:{lineno} imports {module}"
