"""A partition replica's plain values: what a produce got, and how long the partition keeps its records."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProduceResult", "RetentionPolicy"]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    log_append_time_ms: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    retention_ms: int  # -1: keep forever
    retention_bytes: int  # -1: no size limit
