"""MemoryStorage passes the storage conformance suite, and keeps payloads without copying them."""

from __future__ import annotations

import pytest

from multiraft.raft import ConfState, EntryKind, InvalidRequestError, MemoryStorage, MutableStorage

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


def test_memory_storage_refuses_to_compact_past_its_snapshot() -> None:
    storage = MemoryStorage()
    storage.append([entry(i, 1) for i in range(1, 6)])
    storage.create_snapshot(3, ConfState.of((1,)), b"")
    with pytest.raises(InvalidRequestError, match="after the snapshot"):
        storage.compact(4)
