"""The client is light: ``from multiraft import Producer, Consumer, Admin`` loads neither the storage engine
(lmdb, the log, check and repair) nor the node runtime, nor the code generators grpcio would pull in.

Checked in a fresh interpreter, since the test process has imported everything already. ``-X importtime``
prints the import tree on stderr, which names the chain that brought a forbidden module in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CLIENT_IMPORT = "from multiraft import Producer, Consumer, Admin"
# Of storage, the client needs the record-batch format and its errors only.
_STORAGE_ALLOWED = frozenset(
    {"storage", "storage.batch", "storage._batch_header", "storage._batch_decode", "storage.errors"}
)  # storage.batch is split into the two private modules it re-exports
_FORBIDDEN_PACKAGES = ("lmdb", "grpc_tools", "multiraft.node", "multiraft.controller", "multiraft.raft", "membership")


def _forbidden(module: str) -> bool:
    if module == "storage" or module.startswith("storage."):
        return module not in _STORAGE_ALLOWED
    return any(module == package or module.startswith(package + ".") for package in _FORBIDDEN_PACKAGES)


def _import_tree(importtime: str) -> list[tuple[int, str]]:
    """(depth, module) per ``-X importtime`` line, in its order: a module's imports come before it, one deeper."""
    tree: list[tuple[int, str]] = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or line.endswith("imported package"):
            continue
        field = line.rsplit("|", 1)[1]
        name = field.lstrip()
        tree.append(((len(field) - len(name) - 1) // 2, name))
    return tree


def _chain(tree: list[tuple[int, str]], module: str) -> str:
    """Who imported ``module`` first, from the top-level import down, e.g. ``rpc.client -> storage -> lmdb``."""
    position = next((i for i, (_, name) in enumerate(tree) if name == module), None)
    if position is None:
        return module
    depth, chain = tree[position][0], [module]
    for level, name in tree[position + 1 :]:
        if level < depth:
            chain.append(name)
            depth = level
    return " -> ".join(reversed(chain))


def _offenders(code: str) -> list[str]:
    """Each forbidden module that ``code`` loads, with the chain that imported it."""
    script = f"{code}; import sys; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    tree = _import_tree(result.stderr)
    return [_chain(tree, module) for module in result.stdout.split() if _forbidden(module)]


def test_importing_the_client_loads_no_storage_engine_node_runtime_or_code_generator() -> None:
    assert _offenders(_CLIENT_IMPORT) == []


def test_the_check_names_a_forbidden_module_and_the_chain_that_imported_it() -> None:
    offenders = _offenders(f"{_CLIENT_IMPORT}; import storage.check")
    assert "storage.check" in offenders
    assert any(chain.startswith("storage.check -> ") and chain.endswith(" -> lmdb") for chain in offenders), offenders
