"""The public client API: where it is imported from, what it costs to import, and how it rejects bad settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import multiraft
import multiraft.client
import multiraft.errors
from multiraft import ConfigError, Consumer, Producer

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_api_is_importable_from_the_multiraft_package() -> None:
    from multiraft import Admin, Record, RecordMetadata, TopicPartition  # noqa: F401

    for name in multiraft.client.__all__:
        assert getattr(multiraft, name) is getattr(multiraft.client, name)
    for name in multiraft.errors.__all__:  # every error class, kept in step with multiraft.errors
        error = getattr(multiraft.errors, name)
        if isinstance(error, type) and issubclass(error, Exception):
            assert getattr(multiraft.client, name) is error
            assert name in multiraft.__all__
    with pytest.raises(AttributeError):
        multiraft.NoSuchThing  # noqa: B018


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
