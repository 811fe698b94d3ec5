"""One exception tree per public face, and no two of our exception classes share a name.

A caller who catches ``UnavailableError`` must not have to ask which of several it is, and no module should
need ``import ... as`` to tell two of ours apart. Each errors module draws its tree in its docstring
(DEVELOPERS.md), so the docstring must name every class the module defines.

The errors modules are imported; every other module of our packages is read with :mod:`ast` instead, so this
test neither starts the node runtime nor needs pyspark, and still sees an exception class added anywhere.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("multiraft", "storage", "membership", "rpc", "spark_connector")
ERROR_MODULES = (
    "multiraft.errors",
    "multiraft.raft.errors",
    "multiraft.controller.errors",
    "multiraft.consumer_groups.errors",
    "storage.errors",
    "membership.errors",
    "spark_connector.errors",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _errors_defined_in(module: ModuleType) -> list[type[BaseException]]:
    return [
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == module.__name__
    ]


def _imported_errors() -> dict[str, list[type[BaseException]]]:
    return {name: _errors_defined_in(importlib.import_module(name)) for name in ERROR_MODULES}


def _parsed_modules() -> dict[str, ast.Module]:
    return {
        _module_name(path): ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else ""


BUILTIN_EXCEPTIONS = frozenset(
    name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)
)


def _looks_like_an_exception(base: str, found: set[str]) -> bool:
    # Foreign bases (lmdb.Error, grpc.RpcError) are known only by the naming convention ruff enforces (N818).
    return base in BUILTIN_EXCEPTIONS or base in found or base.endswith(("Error", "Exception"))


def _exception_classes_in_source() -> dict[str, list[str]]:
    """module -> names of the classes it defines (at any depth) that derive from an exception.

    A base counts by its last name (``raft.RaftError`` is ``RaftError``), so a class found on one pass makes
    its subclasses count on the next: ``NotLeader(RaftError)`` is found although its own name says nothing.
    """
    classes = {
        module: [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        for module, tree in _parsed_modules().items()
    }
    found_names: set[str] = set()
    found: dict[str, list[str]] = defaultdict(list)
    changed = True
    while changed:
        changed = False
        for module, nodes in classes.items():
            for node in nodes:
                if node.name in found[module]:
                    continue
                if any(_looks_like_an_exception(_base_name(b), found_names) for b in node.bases):
                    found[module].append(node.name)
                    found_names.add(node.name)
                    changed = True
    return {module: names for module, names in found.items() if names}


def test_the_scan_of_the_sources_finds_every_class_the_errors_modules_define() -> None:
    scanned = _exception_classes_in_source()
    for module, errors in _imported_errors().items():
        assert sorted(scanned.get(module, [])) == sorted(e.__name__ for e in errors), module


def test_no_two_exception_classes_of_ours_share_a_name() -> None:
    where: dict[str, set[str]] = defaultdict(set)
    for module, errors in _imported_errors().items():
        for error in errors:
            where[error.__name__].add(module)
    for module, names in _exception_classes_in_source().items():
        for name in names:
            where[name].add(module)
    clashes = {name: sorted(modules) for name, modules in where.items() if len(modules) > 1}
    assert not clashes, f"exception classes defined more than once: {clashes}"


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_the_errors_module_docstring_names_every_class_it_defines(module_name: str) -> None:
    module = importlib.import_module(module_name)
    doc = module.__doc__ or ""
    missing = [e.__name__ for e in _errors_defined_in(module) if not re.search(rf"\b{e.__name__}\b", doc)]
    assert not missing, f"{module_name}'s docstring does not draw {missing}"


@pytest.mark.parametrize("module_name", ERROR_MODULES)
def test_the_errors_module_exports_every_class_it_defines(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(getattr(module, "__all__", ()))
    assert {e.__name__ for e in _errors_defined_in(module)} <= exported
