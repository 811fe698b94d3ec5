"""Which partition a keyed record goes to: ``crc32c(key) % partitions``.

The definition is part of the public contract (docs/client.md): any client, in any language, that computes
CRC-32C (Castagnoli, as in iSCSI and ``crc32c.crc32c``) of the key's bytes and takes it modulo the topic's
partition count places a key where this one does. It changes only when the partition count changes.
"""

from __future__ import annotations

import crc32c

__all__ = ["partition_for_key"]


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition of ``key`` in a topic of ``partitions`` partitions."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    checksum: int = crc32c.crc32c(key)
    return checksum % partitions
