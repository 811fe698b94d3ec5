"""Storage configuration: one frozen dataclass, every field with its unit and default."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from storage._format import ENTRY_HEADER_SIZE
from storage.config_fields import setting
from storage.errors import StorageConfigError

__all__ = ["StorageConfig", "describe_fields"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """How a node's log store lays out and protects its data."""

    segment_bytes: int = setting(
        1 * GiB, "bytes", "A segment rolls before an entry would take it past this size. Default 1 GiB."
    )
    segment_ms: int = setting(
        7 * DAY_MS,
        "milliseconds",
        "A segment rolls at the first entry whose timestamp is this much later than the segment's first "
        "timestamp. Decided from entry timestamps only, so every replica rolls at the same entry. Default 7 days.",
    )
    max_entry_bytes: int = setting(
        16 * MiB, "bytes", "Largest entry (header plus payload) append() accepts. Default 16 MiB."
    )
    map_size_bytes: int = setting(
        1024 * GiB,
        "bytes",
        "LMDB map size: the most the store file may grow to. Address space only; the file grows as it is "
        "written. Default 1 TiB.",
    )
    max_segments: int = setting(
        65536,
        "segments",
        "Most segments that may exist at once across every log in the store (each uses two LMDB named "
        "databases). Default 65536.",
    )
    verify_on_open: bool = setting(
        False,
        "flag",
        "Walk every LMDB page with the offline structural verifier before opening. Slow on large stores; "
        "`multiraft storage check` always does it. Default false.",
    )

    @property
    def max_payload_bytes(self) -> int:
        """The largest payload (a record batch, a command) one entry holds: max_entry_bytes less the entry
        header. Anything larger must be refused before it is proposed: the store refuses it at write time."""
        return self.max_entry_bytes - ENTRY_HEADER_SIZE

    def validate(self) -> StorageConfig:
        """Return self, or raise :class:`StorageConfigError` naming the first wrong field."""
        if self.segment_bytes < 1 * KiB:
            raise StorageConfigError("segment_bytes", f"must be at least 1024, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise StorageConfigError("segment_ms", f"must be at least 1, got {self.segment_ms}")
        if not 64 <= self.max_entry_bytes <= 1 * GiB:
            raise StorageConfigError("max_entry_bytes", f"must be in [64, 1 GiB], got {self.max_entry_bytes}")
        if self.map_size_bytes < 16 * MiB:
            raise StorageConfigError("map_size_bytes", f"must be at least 16 MiB, got {self.map_size_bytes}")
        if not 1 <= self.max_segments <= 1_000_000:
            raise StorageConfigError("max_segments", f"must be in [1, 1000000], got {self.max_segments}")
        if not isinstance(self.verify_on_open, bool):
            raise StorageConfigError("verify_on_open", f"must be a bool, got {self.verify_on_open!r}")
        return self


def describe_fields(config_type: type) -> list[tuple[str, str, Any, str]]:
    """(name, unit, default, doc) for each field of a config dataclass, for generated reference docs."""
    return [(f.name, f.metadata.get("unit", ""), f.default, f.metadata.get("doc", "")) for f in fields(config_type)]
