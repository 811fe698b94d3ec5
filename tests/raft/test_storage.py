"""MemoryStorage passes the storage conformance suite, and keeps payloads without copying them."""

from __future__ import annotations

import pytest

from multiraft.raft import EntryKind, MemoryStorage, MutableStorage

from .storage_conformance import StorageConformance, entry


class TestMemoryStorageConformance(StorageConformance):
    @pytest.fixture
    def storage(self) -> MutableStorage:
        return MemoryStorage()


def test_memory_storage_returns_the_payload_objects_it_was_given() -> None:
    storage = MemoryStorage()
    payload = b"p" * 4096
    storage.append([entry(1, 1, payload, EntryKind.DATA)])
    assert storage.entries(1, 2, 1 << 30)[0].payload is payload
