"""Helpers for the storage tests: small segments so tests roll and drop segments quickly, and entries to append."""

from __future__ import annotations

from storage import Entry, EntryKind, StorageConfig, encode_batch

SMALL = StorageConfig(segment_bytes=4096, segment_ms=1000)


def batch(count: int = 3, *, value: bytes = b"v" * 50, timestamp_ms: int = 1_000) -> bytes:
    return encode_batch([value] * count, timestamps_ms=timestamp_ms)


def data(index: int, term: int = 1, *, count: int = 3, timestamp_ms: int = 1_000, value: bytes = b"v" * 50) -> Entry:
    return Entry(index, term, EntryKind.DATA, timestamp_ms, batch(count, value=value, timestamp_ms=timestamp_ms))


def noop(index: int, term: int = 1, timestamp_ms: int = 0) -> Entry:
    return Entry(index, term, EntryKind.NOOP, timestamp_ms, b"")
