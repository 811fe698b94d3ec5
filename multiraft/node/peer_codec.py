"""The binary primitives of peer messages: a writer and a bounds-checked reader (little-endian).

An integer is ``<q``/``<Q``/``<I``/``<B``; a string or bytes value a ``<I`` length and its bytes (strings
UTF-8); a list a ``<I`` count and its items. The reader checks every length and count against the bytes
actually left before it allocates, and raises :class:`~multiraft.errors.InvalidArgumentError` naming the
message and field, and nothing else.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import TypeVar

from multiraft.errors import InvalidArgumentError

__all__ = ["Writer", "Reader", "decode"]

T = TypeVar("T")

_MAX_COUNT = 1 << 24  # no list of ours comes near this; a count above it is a lie
_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")


class Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def u8(self, value: int) -> None:
        self.parts.append(_U8.pack(value))

    def u32(self, value: int) -> None:
        self.parts.append(_U32.pack(value))

    def u64(self, value: int) -> None:
        self.parts.append(_U64.pack(value))

    def i64(self, value: int) -> None:
        self.parts.append(_I64.pack(value))

    def f64(self, value: float) -> None:
        self.parts.append(_F64.pack(value))

    def raw(self, value: bytes) -> None:
        self.u32(len(value))
        self.parts.append(value)

    def text(self, value: str) -> None:
        self.raw(value.encode())

    def ints(self, values: Sequence[int]) -> None:
        self.u32(len(values))
        self.parts.append(struct.pack(f"<{len(values)}q", *values))

    def texts(self, values: Sequence[str]) -> None:
        self.u32(len(values))
        for value in values:
            self.text(value)

    def mapping(self, values: dict[str, str]) -> None:
        self.u32(len(values))
        for key, value in values.items():
            self.text(key)
            self.text(value)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self.view = memoryview(data)
        self.at = 0
        self.what = what

    def fail(self, field: str, problem: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"malformed {self.what} message: {field} {problem}", field=f"{self.what}.{field}")

    def _take(self, size: int, field: str) -> memoryview:
        if size < 0 or self.at + size > len(self.view):
            raise self.fail(field, f"needs {size} bytes, {len(self.view) - self.at} left")
        chunk = self.view[self.at : self.at + size]
        self.at += size
        return chunk

    def u8(self, field: str) -> int:
        return int(_U8.unpack(self._take(1, field))[0])

    def flag(self, field: str) -> bool:
        value = self.u8(field)
        if value > 1:
            raise self.fail(field, f"is {value}, not 0 or 1")
        return value == 1

    def u32(self, field: str) -> int:
        return int(_U32.unpack(self._take(4, field))[0])

    def u64(self, field: str) -> int:
        return int(_U64.unpack(self._take(8, field))[0])

    def i64(self, field: str) -> int:
        return int(_I64.unpack(self._take(8, field))[0])

    def count(self, field: str, item_bytes: int) -> int:
        n = self.u32(field)
        if n > _MAX_COUNT or n * item_bytes > len(self.view) - self.at:
            raise self.fail(field, f"claims {n} items, more than the bytes left can hold")
        return n

    def f64(self, field: str) -> float:
        value = float(_F64.unpack(self._take(8, field))[0])
        if not math.isfinite(value):
            raise self.fail(field, "is not a finite number")
        return value

    def raw(self, field: str) -> bytes:
        return bytes(self._take(self.u32(field), field))

    def text(self, field: str) -> str:
        try:
            return self.raw(field).decode()
        except UnicodeDecodeError as exc:
            raise self.fail(field, "is not UTF-8") from exc

    def ints(self, field: str) -> tuple[int, ...]:
        n = self.count(field, 8)
        return struct.unpack(f"<{n}q", self._take(8 * n, field))

    def texts(self, field: str) -> tuple[str, ...]:
        return tuple(self.text(field) for _ in range(self.count(field, 4)))

    def mapping(self, field: str) -> dict[str, str]:
        return {self.text(field): self.text(field) for _ in range(self.count(field, 8))}

    def items(self, field: str, min_bytes: int, read: Callable[[], T]) -> list[T]:
        return [read() for _ in range(self.count(field, min_bytes))]

    def done(self) -> None:
        if self.at != len(self.view):
            raise self.fail("message", f"has {len(self.view) - self.at} trailing bytes")

    def id(self, field: str) -> int:
        value = self.i64(field)
        if value < 0:
            raise self.fail(field, f"must be >= 0, got {value}")
        return value


def decode(data: bytes | memoryview, what: str, read: Callable[[Reader], T]) -> T:
    """``read`` the whole of ``data`` (trailing bytes are refused)."""
    reader = Reader(data, what)
    value = read(reader)
    reader.done()
    return value
