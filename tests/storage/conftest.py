"""Fixtures of the storage tests: a store with small segments (``_helpers.SMALL``) in a fresh directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import LogStore
from tests.storage._helpers import SMALL


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogStore]:
    opened = LogStore.open(tmp_path / "node", SMALL)
    yield opened
    opened.close()
