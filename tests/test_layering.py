"""Dependencies point one way (DEVELOPERS.md): this test fails when a module imports what its layer must not.

Every import statement counts, including ones inside functions and ``TYPE_CHECKING`` blocks, because a
lazy import is still a dependency. Library packages also add no clock to their log events: timestamps are
added once, where events are rendered (``multiraft.logging``), so the sans-IO Raft core never reads a clock.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("multiraft", "storage", "rpc", "membership", "spark_connector", "tests", "benchmarks", "scripts")

# What a pure core (no I/O of its own) must not import: our other packages, and anything that touches
# sockets, files, clocks, threads or global randomness.
_PURE = (
    "multiraft.",
    "storage",
    "rpc",
    "membership",
    "spark_connector",
    "tests",
    "benchmarks",
    "socket",
    "ssl",
    "selectors",
    "asyncio",
    "threading",
    "multiprocessing",
    "subprocess",
    "concurrent",
    "time",
    "datetime",
    "random",
    "secrets",
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "signal",
    "lmdb",
    "grpc",
)


def _face() -> tuple[str, ...]:
    """The public face: ``multiraft`` itself and the names of its ``__all__`` (read, not imported)."""
    tree = ast.parse((ROOT / "multiraft" / "__init__.py").read_text())
    names = next(n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__all__")
    return ("multiraft$", *(f"multiraft.{name}$" for name in ast.literal_eval(names)))


_FACE = _face()

# The node runtime's rooms from the bottom floor up (each folder's __init__ says what lives there): the
# replicas and the scheduler that drives them (scheduler thread), then the event loop's peer transport,
# catch-up, the cluster's view and the services the front doors call.
NODE_ROOMS = ("replicas", "scheduler", "peer", "catchup", "cluster", "services")

# The peer wire's codec modules.
_PEER_CODEC = (
    "multiraft.node.peer.messages",
    "multiraft.node.peer.consumer_group_messages",
)

# layer (module prefix) -> module prefixes it must not import. The most specific layer wins.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "storage": ("multiraft", "rpc", "membership", "spark_connector", "tests", "benchmarks"),
    # The shared binary primitives are a pure leaf (no other module of ours, no I/O): every floor may use them.
    "storage.binary": _PURE,
    "membership": ("multiraft", "storage", "rpc", "spark_connector", "tests", "benchmarks"),
    # The Raft core is sans-IO: none of our other packages, and nothing that touches sockets, files,
    # clocks, threads or global randomness (a seeded generator is injected).
    "multiraft.raft": _PURE,
    # The controller's state machine is pure too: the node runtime does its I/O.
    "multiraft.controller": _PURE,
    # So is the consumer-group coordinator: the gRPC surface and a Kafka front door drive it.
    "multiraft.consumer_groups": _PURE,
    # Nothing below the tools (CLI, launcher, nemesis) imports them: they are the top floor.
    "multiraft": ("spark_connector", "tests", "benchmarks", "multiraft.tools"),
    "multiraft.tools": ("spark_connector", "tests", "benchmarks"),
    # The node runtime knows no front door: gRPC servicers and the server are built on its services, outside.
    "multiraft.node": ("rpc", "spark_connector", "tests", "benchmarks"),
    # The node's vocabulary is plain values every room may import: no codec, no storage, no room of the node.
    "multiraft.node.vocabulary": (*_PURE, "struct"),
    # The node's rooms, bottom to top (NODE_ROOMS): each may import the rooms below it, never one above it nor
    # node.py, which wires them. The rooms speak the vocabulary; only the peer room (and catch-up's wire
    # parts) encode it.
    **{
        f"multiraft.node.{room}": (
            *(f"multiraft.node.{above}" for above in NODE_ROOMS[i + 1 :]),
            "multiraft.node.node",
            *(_PEER_CODEC if room in ("cluster", "replicas", "scheduler", "services") else ()),
        )
        for i, room in enumerate(NODE_ROOMS)
    },
    "rpc": ("spark_connector", "tests", "benchmarks", "multiraft.tools"),
    # The client library must stay importable without the node runtime, and light: no storage engine.
    "rpc.client": (
        "multiraft.node",
        "multiraft.controller",
        "multiraft.raft",
        "rpc.server",
        "membership",
        "storage",
    ),
    # The nemesis drives clusters from outside, as a user would: the public client API and the launcher
    # (it reads stopped nodes' log stores offline with storage), never the node runtime.
    "multiraft.tools.nemesis": (
        "multiraft.node",
        "multiraft.controller",
        "multiraft.raft",
        "rpc",
        "membership",
        "spark_connector",
        "tests",
        "benchmarks",
    ),
    "spark_connector": ("multiraft.", "storage", "rpc.", "membership", "tests", "benchmarks"),
}
# Exceptions to a forbidden prefix for a layer: the connector may use the public face (`multiraft`) only.
ALLOWED: dict[str, tuple[str, ...]] = {
    # The pure cores' codecs are written over the shared binary primitives (a pure leaf).
    "multiraft.raft": ("multiraft.raft", "storage.binary"),
    "multiraft.tools": ("multiraft.tools",),
    "multiraft.controller": ("multiraft.controller", "storage.binary"),
    "multiraft.consumer_groups": ("multiraft.consumer_groups",),
    # The bottom floor's leaves: the shared binary primitives and the config field helper; membership
    # imports nothing else of ours.
    "membership": ("storage.binary", "storage.config_fields"),
    "multiraft.node.vocabulary": (
        "multiraft.node.vocabulary",
        "multiraft.controller",
        "multiraft.consumer_groups",
        "multiraft.errors",
    ),
    "spark_connector": (*_FACE,),
    # The peer wire's front door (decodes a peer's request, calls the service, encodes the answer) and the
    # leadership broadcast sit above the peer room by what they call, yet speak its wire.
    "multiraft.node.services.peer_requests": _PEER_CODEC,
    "multiraft.node.cluster.leader_broadcast": _PEER_CODEC,
    # The client shares the record-batch format with storage and uses none of the engine (light to import).
    "rpc.client": ("storage.batch", "storage.errors"),
    # The debug switch's module defines the cuts file the nemesis writes.
    "multiraft.tools.nemesis": ("multiraft.node.debug", "multiraft.tools"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> Iterator[tuple[int, str]]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from multiraft import raft` imports multiraft.raft
                yield node.lineno, f"{target}.{alias.name}"


def _matches(name: str, prefix: str) -> bool:
    if prefix.endswith("$"):  # this module or name exactly, nothing under it
        return name == prefix[:-1]
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


def _layer(module: str) -> str | None:
    candidates = [layer for layer in FORBIDDEN if _matches(module, layer)]
    return max(candidates, key=len) if candidates else None


def _source_files() -> list[Path]:
    files: list[Path] = []
    for package in OURS[:5]:
        files.extend(p for p in (ROOT / package).rglob("*.py") if "_generated" not in p.parts)
    return sorted(files)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _violations(path: Path, module: str | None = None) -> list[str]:
    """Forbidden imports of the file at ``path``, checked as the module ``module`` (by default its own name)."""
    module = module or _module_name(path)
    layers = [layer for layer in FORBIDDEN if _matches(module, layer)]
    if not layers:
        return []
    forbidden = [rule for layer in layers for rule in FORBIDDEN[layer]]
    allowed = [module, *(a for key, names in ALLOWED.items() if _matches(module, key) for a in names)]
    found: list[str] = []
    reported_lines: set[int] = set()
    for lineno, name in _imports(path, module):
        if lineno in reported_lines or any(_matches(name, a) for a in allowed):
            continue
        if any(_matches(name, rule) for rule in forbidden):
            reported_lines.add(lineno)
            found.append(f"{_shown(path)}:{lineno}: {module} ({_layer(module)}) imports {name}")
    return found


# Library packages that must not stamp their log events with the time (structlog's TimeStamper reads the
# wall clock on every event): multiraft.logging adds the timestamp once, when it renders an event.
NO_CLOCK_PROCESSORS = ("storage", "membership", "multiraft.raft")
_CLOCK_PROCESSORS = frozenset({"TimeStamper"})


def _clock_processors(path: Path, module: str | None = None) -> list[str]:
    module = module or _module_name(path)
    if not any(_matches(module, layer) for layer in NO_CLOCK_PROCESSORS):
        return []
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [part for alias in node.names for part in alias.name.split(".")]
        found += [f"{_shown(path)}:{node.lineno}: {module} uses {n}" for n in names if n in _CLOCK_PROCESSORS]
    return found


@pytest.mark.parametrize("path", _source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_imports_only_what_its_layer_allows(path: Path) -> None:
    assert _violations(path) == []


@pytest.mark.parametrize("path", _source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_library_log_events_carry_no_clock_of_their_own(path: Path) -> None:
    assert _clock_processors(path) == []


def test_the_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text("def f():\n    from multiraft.node import x\n")
    assert _violations(probe, "storage._layering_probe") == [
        "_layering_probe.py:2: storage._layering_probe (storage) imports multiraft.node"
    ]
    assert _violations(probe, "multiraft.tools.cli._layering_probe") == []  # the runtime may use the node


def test_the_node_runtime_may_not_import_the_servicers_or_the_server(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text(
        "from rpc.server.log_servicer import LogServicer\nimport rpc.server.front_door\nfrom storage import LogStore\n"
    )
    assert _violations(probe, "multiraft.node._layering_probe") == [
        "_layering_probe.py:1: multiraft.node._layering_probe (multiraft.node) imports rpc.server.log_servicer",
        "_layering_probe.py:2: multiraft.node._layering_probe (multiraft.node) imports rpc.server.front_door",
    ]
    assert _violations(probe, "multiraft.tools.cli._layering_probe") == []  # the CLI wires node and front door


def test_the_node_vocabulary_may_not_import_a_codec_or_a_room(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text(
        "import struct\nfrom multiraft.node.peer.messages import decode\n"
        "from multiraft.node.replicas import partition\n"
        "from multiraft import controller as ctl\nfrom multiraft.errors import InvalidArgumentError\n"
    )
    module = "multiraft.node.vocabulary._layering_probe"
    assert _violations(probe, module) == [
        f"_layering_probe.py:1: {module} (multiraft.node.vocabulary) imports struct",
        f"_layering_probe.py:2: {module} (multiraft.node.vocabulary) imports multiraft.node.peer.messages",
        f"_layering_probe.py:3: {module} (multiraft.node.vocabulary) imports multiraft.node.replicas",
    ]


def test_only_the_peer_room_imports_the_peer_codec(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text(
        "from multiraft.node.peer.messages import STATUS_OK\nfrom multiraft.node.vocabulary import offsets\n"
    )
    assert _violations(probe, "multiraft.node.services._layering_probe") == [
        "_layering_probe.py:1: multiraft.node.services._layering_probe (multiraft.node.services) imports "
        "multiraft.node.peer.messages"
    ]
    assert _violations(probe, "multiraft.node.peer._layering_probe") == []


def test_the_runtime_the_rebalancer_and_the_servicers_form_no_import_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for path in _source_files():
        module = _module_name(path)
        if _matches(module, "multiraft.node") or _matches(module, "rpc"):
            edges[module] = {name for _, name in _imports(path, module)}
    known = set(edges)

    def targets(module: str) -> set[str]:
        found = set()
        for imported in edges[module]:
            name = imported
            while name and name not in known:  # `from a.b import c` names a.b.c: the module is a.b
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
        return found

    reach = {m: targets(m) for m in known}
    for start in (
        "multiraft.node.node",
        "multiraft.node.cluster.rebalancer",
        "rpc.server.log_servicer",
        "rpc.server.admin_servicer",
        "rpc.server.front_door",
    ):
        seen, todo = set(), [start]
        while todo:
            for nxt in reach.get(todo.pop(), set()) - seen:
                seen.add(nxt)
                todo.append(nxt)
        assert start not in seen, f"{start} imports itself through {sorted(seen)}"


def test_the_client_may_use_the_batch_format_but_not_the_storage_engine(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text(
        "from storage.batch import encode_batch\n"
        "from storage.errors import BatchFormatError\n"
        "from storage import LogStore\n"
        "import storage.log\n"
    )
    for module, layer in (("rpc.client._layering_probe", "rpc.client"),):
        assert _violations(probe, module) == [
            f"_layering_probe.py:3: {module} ({layer}) imports storage",
            f"_layering_probe.py:4: {module} ({layer}) imports storage.log",
        ]
    assert _violations(probe, "multiraft.tools.cli._layering_probe") == []  # the runtime may use the engine


def test_membership_and_the_pure_cores_may_use_the_binary_primitives_and_nothing_else_of_storage(
    tmp_path: Path,
) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text("from storage.binary import Reader\nfrom storage import binary\nimport storage.log\n")
    for module, layer in (
        ("membership._layering_probe", "membership"),
        ("multiraft.raft._layering_probe", "multiraft.raft"),
        ("multiraft.controller._layering_probe", "multiraft.controller"),
    ):
        assert _violations(probe, module) == [  # `from storage import binary` names the package too
            f"_layering_probe.py:2: {module} ({layer}) imports storage",
            f"_layering_probe.py:3: {module} ({layer}) imports storage.log",
        ]


def test_the_binary_primitives_import_nothing_of_ours_and_do_no_io(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text("import struct\nimport os\nfrom storage.errors import StorageError\n")
    assert _violations(probe, "storage.binary") == [
        "_layering_probe.py:2: storage.binary (storage.binary) imports os",
        "_layering_probe.py:3: storage.binary (storage.binary) imports storage.errors",
    ]


def test_the_raft_core_may_not_read_the_clock(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text("import time\nfrom . import log\nfrom multiraft.raft import node\nfrom datetime import date\n")
    assert _violations(probe, "multiraft.raft._layering_probe") == [
        "_layering_probe.py:1: multiraft.raft._layering_probe (multiraft.raft) imports time",
        "_layering_probe.py:4: multiraft.raft._layering_probe (multiraft.raft) imports datetime",
    ]


def test_the_group_coordinator_may_not_read_the_clock_or_draw_random_numbers(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text("import time\nimport random\nfrom multiraft.node import offsets\nfrom . import assignors\n")
    module = "multiraft.consumer_groups._layering_probe"
    assert _violations(probe, module) == [
        f"_layering_probe.py:1: {module} (multiraft.consumer_groups) imports time",
        f"_layering_probe.py:2: {module} (multiraft.consumer_groups) imports random",
        f"_layering_probe.py:3: {module} (multiraft.consumer_groups) imports multiraft.node",
    ]


def test_the_checker_catches_a_clock_processor_in_a_library(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text(
        "import structlog\n"
        "from structlog.processors import TimeStamper\n"
        "stamp = structlog.processors.TimeStamper(fmt='iso')\n"
    )
    expected = [
        "_layering_probe.py:2: {module} uses TimeStamper",
        "_layering_probe.py:3: {module} uses TimeStamper",
    ]
    for module in ("multiraft.raft._raft_probe", "storage._probe", "membership._probe"):
        assert sorted(_clock_processors(probe, module)) == [line.format(module=module) for line in expected]
    assert _clock_processors(probe, "multiraft.logging") == []  # where events are rendered


def test_the_spark_connector_may_use_the_public_face_only(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text("from multiraft import Producer\nimport multiraft\nfrom multiraft.node import Node\n")
    assert _violations(probe, "spark_connector._layering_probe") == [
        "_layering_probe.py:3: spark_connector._layering_probe (spark_connector) imports multiraft.node"
    ]


def test_nothing_below_the_tools_imports_them(tmp_path: Path) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text("from multiraft.tools.launcher import Cluster\n")
    for module in (
        "multiraft.node._layering_probe",
        "rpc.server._layering_probe",
        "multiraft._layering_probe",
    ):
        assert len(_violations(probe, module)) == 1
    assert _violations(probe, "multiraft.tools.nemesis._layering_probe") == []


@pytest.mark.parametrize(
    ("room", "above"),
    [
        ("replicas", "scheduler"),
        ("scheduler", "cluster"),
        ("scheduler", "services"),
        ("peer", "cluster"),
        ("cluster", "services"),
        ("catchup", "services"),
        ("services", "node"),
    ],
)
def test_a_node_room_may_not_import_a_room_above_it(tmp_path: Path, room: str, above: str) -> None:
    probe = tmp_path / "_layering_probe.py"
    probe.write_text(f"from multiraft.node.{above} import x\nfrom multiraft.node.vocabulary import status\n")
    module = f"multiraft.node.{room}._layering_probe"
    assert _violations(probe, module) == [
        f"_layering_probe.py:1: {module} (multiraft.node.{room}) imports multiraft.node.{above}"
    ]
    assert _violations(probe, f"multiraft.node.{above}._layering_probe") == []  # downward is fine
