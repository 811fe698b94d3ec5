"""Damaging a stored LMDB file the way a bad disk would, for tests of checks and repair."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["flip_every_copy"]


def flip_every_copy(data_file: Path, marker: bytes, *, at: int = 3, mask: int = 0x01) -> int:
    """XORs ``mask`` into byte ``at`` of every copy of ``marker`` in the file, in place; returns the copies hit.

    Every copy, since LMDB's copy-on-write leaves stale copies in free pages, and which copy comes first in the
    file depends on when read transactions were released: hitting only the first one sometimes misses the live
    entry. Writing in place keeps the inode, so a store that maps the file sees the damage on its next read.
    """
    raw = data_file.read_bytes()
    spots = [found.start() + at for found in re.finditer(re.escape(marker), raw)]
    if not spots:
        raise AssertionError(f"{marker!r} is not in {data_file}")
    with data_file.open("r+b") as file:
        for spot in spots:
            file.seek(spot)
            file.write(bytes([raw[spot] ^ mask]))
    return len(spots)
