"""Gossip waiting to be piggybacked: each message is sent a limited number of times, newest news first.

Messages are keyed by the member they are about, so newer news about a member replaces older news that has
not finished spreading (as memberlist's ``TransmitLimitedQueue``). Messages sent fewer times go first, so
fresh news spreads before old news is repeated.
"""

from __future__ import annotations

__all__ = ["BroadcastQueue"]

# A frame header (3 bytes) plus the smallest gossip body (suspect/dead: 20 bytes).
_SMALLEST_GOSSIP = 23


class _Broadcast:
    __slots__ = ("key", "order", "payload", "transmits")

    def __init__(self, key: int, payload: bytes, order: int) -> None:
        self.key = key
        self.payload = payload
        self.order = order
        self.transmits = 0


class BroadcastQueue:
    """Encoded gossip frames waiting to be sent, at most one per member."""

    __slots__ = ("_buckets", "_by_key", "_order")

    def __init__(self) -> None:
        self._by_key: dict[int, _Broadcast] = {}
        # transmits -> broadcasts with that many sends, oldest first (insertion order).
        self._buckets: dict[int, dict[int, _Broadcast]] = {}
        self._order = 0

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def transmits(self, key: int) -> int | None:
        item = self._by_key.get(key)
        return None if item is None else item.transmits

    def put(self, key: int, payload: bytes) -> None:
        """Queue ``payload`` about member ``key``, replacing whatever was queued about it."""
        self.discard(key)
        self._order += 1
        item = _Broadcast(key, payload, self._order)
        self._by_key[key] = item
        self._buckets.setdefault(0, {})[item.order] = item

    def discard(self, key: int) -> None:
        item = self._by_key.pop(key, None)
        if item is not None:
            self._unbucket(item)

    def take(self, budget: int, limit: int) -> list[bytes]:
        """Frames that fit in ``budget`` bytes, least-sent and then newest first; each counts one send.

        A frame is dropped once sent ``limit`` times, or unsent if ``limit`` has shrunk below its count.
        """
        if not self._by_key or budget < _SMALLEST_GOSSIP:
            return []
        picked: list[_Broadcast] = []
        spent: list[_Broadcast] = []
        for transmits in sorted(self._buckets):
            if transmits >= limit:
                spent.extend(self._buckets[transmits].values())
                continue
            if budget < _SMALLEST_GOSSIP:
                break
            for item in reversed(self._buckets[transmits].values()):
                if len(item.payload) <= budget:
                    picked.append(item)
                    budget -= len(item.payload)
                    if budget < _SMALLEST_GOSSIP:
                        break
        for item in spent:
            self._unbucket(item)
            del self._by_key[item.key]
        # Oldest first, so each bucket's insertion order stays oldest-to-newest.
        for item in reversed(picked):
            self._unbucket(item)
            item.transmits += 1
            if item.transmits >= limit:
                del self._by_key[item.key]
            else:
                self._buckets.setdefault(item.transmits, {})[item.order] = item
        return [item.payload for item in picked]

    def _unbucket(self, item: _Broadcast) -> None:
        bucket = self._buckets[item.transmits]
        del bucket[item.order]
        if not bucket:
            del self._buckets[item.transmits]
