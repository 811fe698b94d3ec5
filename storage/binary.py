"""The one set of bounds-checked binary primitives: a :class:`Writer` and a :class:`Reader`.

Every hand-written binary codec of the project is written over these: the Raft messages and configuration
records (:mod:`multiraft.raft.codec`), the node's peer messages (:mod:`multiraft.node.peer.messages`,
``peer_groups``, ``capacity``), SWIM's gossip packets and push-pull states (:mod:`membership._wire`) and the
controller snapshot's header (:mod:`multiraft.controller._codec`). It is a leaf that imports nothing of ours
and does no I/O, so the bottom floor (storage, membership) and the pure cores (the Raft core, the controller)
may all use it.

Layout: integers are fixed width, little-endian unless a codec picks big-endian (``order=BIG``: SWIM's wire);
bytes and strings carry a 1-, 2- or 4-byte length prefix (strings UTF-8) and may have a maximum length; a list
carries a ``u32`` count. No codec of ours uses varints, so there are none.

Checking: the reader checks every size, length and count against the bytes actually left *before* it slices
or allocates, so a lying length costs nothing. Malformed input raises :class:`BinaryDecodeError` naming the
message, the field and the byte offset; a value that does not fit its field raises :class:`BinaryEncodeError`.
Neither raises anything else (no ``IndexError``, no ``struct.error``). A codec maps them to its own error at
its boundary (``raise CodecError(...) from exc``): the primitives stay ignorant of four packages' error
constructors, and the structured fields (``what``, ``field``, ``offset``) stay on the cause.

Speed: every fixed-width field is a precompiled :class:`struct.Struct`; composite headers go through
:meth:`Reader.struct`/:meth:`Writer.struct` as one ``unpack_from``/``pack``; tables through
:meth:`Reader.structs` (``iter_unpack``) and :meth:`Reader.array`; slices are zero-copy ``memoryview``\\ s.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Sequence
from struct import Struct
from typing import Any, Final, Literal, TypeVar

__all__ = [
    "LITTLE",
    "BIG",
    "ByteOrder",
    "MAX_COUNT",
    "BinaryError",
    "BinaryDecodeError",
    "BinaryEncodeError",
    "Writer",
    "Reader",
    "decode",
]

T = TypeVar("T")
ByteOrder = Literal["<", ">"]
Width = Literal[1, 2, 4]
Buffer = bytes | bytearray | memoryview

LITTLE: Final = "<"
BIG: Final = ">"
MAX_COUNT: Final = 1 << 24
"""No list of ours comes near this many items: a count above it is a lie, refused before any allocation."""


class BinaryError(ValueError):
    """Base of the primitives' errors."""


class BinaryDecodeError(BinaryError):
    """Input that is not a valid encoding: ``field`` of ``what`` at byte ``offset`` has ``problem``."""

    def __init__(self, what: str, field: str, offset: int, problem: str) -> None:
        super().__init__(f"malformed {what}: {field} {problem} (at byte {offset})")
        self.what = what
        self.field = field
        self.offset = offset
        self.problem = problem


class BinaryEncodeError(BinaryError):
    """A value that does not fit its field (out of range, too long, wrong type)."""


class _Ints:
    """The precompiled fixed-width fields of one byte order."""

    def __init__(self, order: ByteOrder) -> None:
        self.order: ByteOrder = order
        self.u8 = Struct(order + "B")
        self.u16 = Struct(order + "H")
        self.u32 = Struct(order + "I")
        self.u64 = Struct(order + "Q")
        self.i64 = Struct(order + "q")
        self.f64 = Struct(order + "d")
        self.prefix = {1: self.u8, 2: self.u16, 4: self.u32}


_ORDERS = {LITTLE: _Ints(LITTLE), BIG: _Ints(BIG)}


class Writer:
    """Appends fields to a list of parts; :meth:`bytes` joins them once."""

    __slots__ = ("_ints", "parts")

    def __init__(self, order: ByteOrder = LITTLE) -> None:
        self.parts: list[bytes | memoryview] = []
        self._ints = _ORDERS[order]

    def struct(self, layout: Struct, *values: Any) -> None:
        """A composite field in one precompiled layout (its byte order is the layout's own)."""
        try:
            self.parts.append(layout.pack(*values))
        except (struct.error, TypeError) as exc:
            raise BinaryEncodeError(f"{values!r} do not fit {layout.format!r}: {exc}") from exc

    def u8(self, value: int) -> None:
        self.struct(self._ints.u8, value)

    def flag(self, value: bool) -> None:
        self.struct(self._ints.u8, 1 if value else 0)

    def u16(self, value: int) -> None:
        self.struct(self._ints.u16, value)

    def u32(self, value: int) -> None:
        self.struct(self._ints.u32, value)

    def u64(self, value: int) -> None:
        self.struct(self._ints.u64, value)

    def i64(self, value: int) -> None:
        self.struct(self._ints.i64, value)

    def f64(self, value: float) -> None:
        self.struct(self._ints.f64, value)

    def put(self, value: bytes | memoryview) -> None:
        """Bytes as they are, with no length (the layout says how many)."""
        self.parts.append(value)

    def array(self, code: str, values: Sequence[int]) -> None:
        """``values`` back to back, each in the struct format ``code`` (no count)."""
        try:  # struct's own cache compiles each (count, code) format once
            self.parts.append(struct.pack(f"{self._ints.order}{len(values)}{code}", *values))
        except (struct.error, TypeError) as exc:
            raise BinaryEncodeError(f"{len(values)} values do not fit {code!r}: {exc}") from exc

    def raw(self, value: bytes | memoryview, *, width: Width = 4, max_len: int | None = None) -> None:
        """Bytes behind a ``width``-byte length."""
        size = len(value)
        if max_len is not None and size > max_len:
            raise BinaryEncodeError(f"{size} bytes is longer than {max_len}: {bytes(value[:40])!r}...")
        self.struct(self._ints.prefix[width], size)
        self.parts.append(value)

    def text(self, value: str, *, width: Width = 4, max_len: int | None = None) -> None:
        """A UTF-8 string behind a ``width``-byte length of its bytes."""
        self.raw(value.encode(), width=width, max_len=max_len)

    def ints(self, values: Sequence[int]) -> None:
        """A ``u32`` count and that many ``i64``."""
        self.u32(len(values))
        self.array("q", values)

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
    """Reads fields from the front of a buffer, refusing any that runs past its end."""

    __slots__ = ("_ints", "at", "base", "view", "what")

    def __init__(self, data: Buffer, what: str, *, order: ByteOrder = LITTLE, base: int = 0) -> None:
        """``what`` names the message in errors; ``base`` is the offset of ``data`` in the whole input (for
        errors of a nested reader)."""
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1 or view.format != "B":
            view = view.cast("B")
        self.view = view
        self.at = 0
        self.what = what
        self.base = base
        self._ints = _ORDERS[order]

    @property
    def left(self) -> int:
        """How many bytes are not read yet."""
        return len(self.view) - self.at

    def fail(self, field: str, problem: str) -> BinaryDecodeError:
        """The error for ``field`` at the offset where reading stopped; the caller raises it."""
        return BinaryDecodeError(self.what, field, self.base + self.at, problem)

    def take(self, size: int, field: str) -> memoryview:
        """The next ``size`` bytes, a zero-copy slice of the input."""
        at = self.at
        if size < 0 or at + size > len(self.view):
            raise self.fail(field, f"truncated: needs {size} bytes, {len(self.view) - at} left")
        self.at = at + size
        return self.view[at : at + size]

    def struct(self, layout: Struct, field: str) -> tuple[Any, ...]:
        """A composite field in one precompiled layout."""
        at = self.at
        if at + layout.size > len(self.view):
            raise self.fail(field, f"truncated: needs {layout.size} bytes, {len(self.view) - at} left")
        self.at = at + layout.size
        return layout.unpack_from(self.view, at)

    def structs(self, layout: Struct, count: int, field: str) -> Iterator[tuple[Any, ...]]:
        """``count`` records of one layout, back to back (checked as a whole before any is read)."""
        records: Iterator[tuple[Any, ...]] = layout.iter_unpack(self.take(count * layout.size, field))
        return records

    def array(self, code: str, count: int, field: str) -> tuple[Any, ...]:
        """``count`` values back to back, each in the struct format ``code`` (one ``unpack``)."""
        order = self._ints.order
        chunk = self.take(count * struct.calcsize(order + code), field)  # checked before unpack allocates
        return struct.unpack(f"{order}{count}{code}", chunk)

    def u8(self, field: str) -> int:
        return int(self.struct(self._ints.u8, field)[0])

    def flag(self, field: str) -> bool:
        value = self.u8(field)
        if value > 1:
            raise self.fail(field, f"is {value}, not 0 or 1")
        return value == 1

    def u16(self, field: str) -> int:
        return int(self.struct(self._ints.u16, field)[0])

    def u32(self, field: str) -> int:
        return int(self.struct(self._ints.u32, field)[0])

    def u64(self, field: str) -> int:
        return int(self.struct(self._ints.u64, field)[0])

    def i64(self, field: str) -> int:
        return int(self.struct(self._ints.i64, field)[0])

    def id(self, field: str) -> int:
        """A non-negative ``i64``."""
        value = self.i64(field)
        if value < 0:
            raise self.fail(field, f"must be >= 0, got {value}")
        return value

    def f64(self, field: str, *, finite: bool = True) -> float:
        value = float(self.struct(self._ints.f64, field)[0])
        if finite and not math.isfinite(value):
            raise self.fail(field, "is not a finite number")
        return value

    def count(self, field: str, item_bytes: int) -> int:
        """A ``u32`` count of items of at least ``item_bytes`` each, refused if the bytes left cannot hold
        them (so a lying count allocates nothing)."""
        n = self.u32(field)
        if n > MAX_COUNT or n * item_bytes > self.left:
            raise self.fail(field, f"claims {n} items, more than the bytes left can hold")
        return n

    def raw_view(self, field: str, *, width: Width = 4, max_len: int | None = None) -> memoryview:
        """Bytes behind a ``width``-byte length, as a zero-copy slice."""
        size = int(self.struct(self._ints.prefix[width], field)[0])
        if max_len is not None and size > max_len:
            raise self.fail(field, f"is {size} bytes, longer than {max_len}")
        if size > self.left:
            raise self.fail(field, f"runs past its message: {size} bytes, {self.left} left")
        return self.take(size, field)

    def raw(self, field: str, *, width: Width = 4, max_len: int | None = None) -> bytes:
        return bytes(self.raw_view(field, width=width, max_len=max_len))

    def text(self, field: str, *, width: Width = 4, max_len: int | None = None) -> str:
        chunk = self.raw_view(field, width=width, max_len=max_len)
        try:
            return str(chunk, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(field, "is not UTF-8") from exc

    def ints(self, field: str) -> tuple[int, ...]:
        """A ``u32`` count and that many ``i64``."""
        return self.array("q", self.count(field, 8), field)

    def texts(self, field: str) -> tuple[str, ...]:
        return tuple(self.text(field) for _ in range(self.count(field, 4)))

    def mapping(self, field: str) -> dict[str, str]:
        return {self.text(field): self.text(field) for _ in range(self.count(field, 8))}

    def items(self, field: str, min_bytes: int, read: Callable[[], T]) -> list[T]:
        """A ``u32`` count and that many items ``read`` reads, each at least ``min_bytes`` long."""
        return [read() for _ in range(self.count(field, min_bytes))]

    def sub(self, size: int, field: str) -> Reader:
        """A reader of the next ``size`` bytes (a nested record); errors keep whole-input offsets."""
        base = self.base + self.at
        return Reader(self.take(size, field), self.what, order=self._ints.order, base=base)

    def done(self, field: str = "message") -> None:
        """Refuse trailing bytes."""
        if self.at != len(self.view):
            raise self.fail(field, f"has {len(self.view) - self.at} trailing bytes")


def decode(data: Buffer, what: str, read: Callable[[Reader], T], *, order: ByteOrder = LITTLE) -> T:
    """``read`` the whole of ``data`` (trailing bytes are refused)."""
    reader = Reader(data, what, order=order)
    value = read(reader)
    reader.done()
    return value
