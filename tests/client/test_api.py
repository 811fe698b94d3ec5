"""The public client API: where it is imported from, what it costs to import, and how it rejects bad settings."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import multiraft
import multiraft.errors
from multiraft import ConfigError, Consumer, Producer

ROOT = Path(__file__).resolve().parents[2]


def _documented_face() -> list[str]:
    """The names docs/client.md lists under "The public face"."""
    text = (ROOT / "docs" / "client.md").read_text()
    section = text.split("## The public face", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`([A-Za-z_]\w*)`", section.split("<!-- face -->", 2)[1])


def _type_checking_names() -> list[str]:
    """The names multiraft/__init__.py imports for type checkers."""
    tree = ast.parse((ROOT / "multiraft" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return [a.name for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names]


def test_the_public_face_is_one_list_kept_in_step_with_the_docs() -> None:
    face = multiraft.__all__
    assert len(face) == len(set(face))
    assert sorted(face) == sorted(_documented_face())
    assert sorted(face) == sorted(_type_checking_names())
    assert sorted(face) == sorted(multiraft._HOME_OF)


def test_every_public_name_resolves_and_nothing_else_does() -> None:
    from multiraft import Admin, Record, RecordMetadata, TopicPartition  # noqa: F401

    for name in multiraft.__all__:
        assert getattr(multiraft, name) is not None
    with pytest.raises(AttributeError):
        multiraft.NoSuchThing  # noqa: B018
    with pytest.raises(AttributeError):
        multiraft.ClusterClient  # noqa: B018  (the client's implementation is private)


def test_every_error_class_is_on_the_face() -> None:
    for name in multiraft.errors.__all__:
        error = getattr(multiraft.errors, name)
        if isinstance(error, type) and issubclass(error, Exception):
            assert name in multiraft.__all__
            assert getattr(multiraft, name) is error


def test_importing_a_client_class_loads_no_engine() -> None:
    code = (
        "import sys; from multiraft import Producer, Consumer, Admin; "
        "print(sorted(m for m in sys.modules if m == 'lmdb' or m.startswith(('multiraft.node', 'multiraft.raft', "
        "'membership', 'storage._store', 'storage._log', 'rpc.server'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def test_importing_multiraft_loads_neither_grpc_nor_pyarrow() -> None:
    code = "import sys, multiraft; print(sorted(m for m in ('grpc', 'pyarrow', 'rpc.client') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"linger_ms": -1}, "linger_ms"),
        ({"compression": "gzip"}, "compression"),
        ({"max_in_flight": 6}, "max_in_flight"),
        ({"batch_bytes": 2_000, "buffer_bytes": 1_000}, "buffer_bytes"),
        ({"delivery_timeout_s": 0}, "delivery_timeout_s"),
    ],
)
def test_a_producer_with_a_wrong_setting_names_it(settings: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Producer("127.0.0.1:1", **settings)  # type: ignore[arg-type]
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("settings", "field"),
    [({"auto_offset_reset": "none"}, "auto_offset_reset"), ({"max_poll_records": 0}, "max_poll_records")],
)
def test_a_consumer_with_a_wrong_setting_names_it(settings: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Consumer("127.0.0.1:1", **settings)  # type: ignore[arg-type]
    assert raised.value.field == field


def test_a_bad_bootstrap_address_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="host:port"):
        Consumer("localhost")
