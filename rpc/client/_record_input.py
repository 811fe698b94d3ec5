"""What ``Producer.send()`` and ``Producer.send_batch()`` accept, converted to what batches hold.

One record's value, key, headers and timestamp become bytes, header pairs and milliseconds since the epoch;
many records' columns (Python sequences or Arrow arrays) become binary and ``headers_type()`` Arrow arrays
and an int64 array of timestamps. Kept apart from the producer so that the input rules (types accepted, the
errors for the rest) are in one place, and the producer only routes and queues.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rpc.client._accumulator import Header
from storage.batch import headers_type

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    Int64Array = npt.NDArray[np.int64]

__all__ = [
    "Value",
    "Headers",
    "BulkValues",
    "BulkHeaders",
    "BulkTimestamps",
    "to_bytes",
    "to_headers",
    "to_timestamp_ms",
    "binary_column",
    "headers_column",
    "timestamps_column",
]

Value = bytes | bytearray | memoryview | str | None
Headers = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]
BulkValues = Sequence[Value] | Any  # or a binary/string pyarrow Array or ChunkedArray
BulkHeaders = Sequence[Headers | None] | Any  # or a pyarrow array of storage.headers_type()
BulkTimestamps = int | datetime | Sequence[int] | Any | None  # or a numpy or pyarrow array (ms or timestamps)


# ------------------------------------------------------------------------------------- send() values


def to_bytes(value: Value, name: str) -> bytes | None:
    """``value`` as bytes (str as UTF-8), None as None; ``name`` says what it is in the TypeError."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{name} must be bytes, str or None, not {type(value).__name__}")


def to_headers(headers: Headers) -> tuple[Header, ...] | None:
    """A mapping or sequence of ``(name, value)`` pairs as header pairs; None when there are none."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    converted: list[Header] = []
    for item in items:
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, not {type(name).__name__}")
        converted.append((name, to_bytes(value, f"header {name!r}")))
    return tuple(converted) or None


def to_timestamp_ms(timestamp: int | datetime | None) -> int:
    """Milliseconds since the epoch of an int (as it is), a datetime, or None (now)."""
    if timestamp is None:
        return time.time_ns() // 1_000_000
    if isinstance(timestamp, datetime):
        return round(timestamp.timestamp() * 1000)  # naive datetimes are local time, as datetime.timestamp()
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        if timestamp < 0:
            raise ValueError(f"timestamp must be >= 0 ms since the epoch, got {timestamp}")
        return timestamp
    raise TypeError(f"timestamp must be int milliseconds, a datetime or None, not {type(timestamp).__name__}")


# ------------------------------------------------------------------------------- send_batch() columns


def binary_column(values: BulkValues, name: str) -> pa.Array:
    """A binary or string Arrow array of ``values``: Arrow input as it is (no copy), a sequence of bytes
    joined in C (str goes through Arrow's converter)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    if isinstance(values, pa.Array):
        kind = values.type
        if pa.types.is_binary_view(kind) or pa.types.is_string_view(kind):
            return values.cast(pa.binary())  # the batch layout needs contiguous data: one copy
        if not (
            pa.types.is_binary(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_binary(kind)
            or pa.types.is_large_string(kind)
        ):
            raise TypeError(f"{name} must be a binary or string Arrow array, not {kind}")
        return values
    if isinstance(values, str | bytes | bytearray | memoryview) or not isinstance(values, Iterable):
        raise TypeError(
            f"{name} must be a sequence of bytes, str or None, or a pyarrow array, not {type(values).__name__}"
        )
    items = values if isinstance(values, list | tuple) else list(values)
    n = len(items)
    try:
        nulls = items.count(None)
        present = list(map(operator.is_not, items, itertools.repeat(None))) if nulls else None
        kept = list(itertools.compress(items, present)) if present is not None else items
        data = b"".join(kept)
        kept_lengths = np.fromiter(map(len, kept), dtype=np.int64, count=n - nulls)
    except TypeError:  # str (or something Arrow may convert)
        try:
            return pa.array(items, type=pa.binary())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise TypeError(f"{name} must be bytes, str (encoded as UTF-8) or None: {exc}") from exc
    offsets = np.zeros(n + 1, dtype=np.int64)
    validity = None
    if present is not None:
        mask = np.fromiter(present, dtype=bool, count=n)
        lengths = np.zeros(n, dtype=np.int64)
        lengths[mask] = kept_lengths
        np.cumsum(lengths, out=offsets[1:])
        validity = pa.py_buffer(np.packbits(mask, bitorder="little"))
    else:
        np.cumsum(kept_lengths, out=offsets[1:])
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)], nulls
        )
    return pa.Array.from_buffers(pa.large_binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)


def headers_column(headers: BulkHeaders) -> pa.Array:
    """A ``headers_type()`` Arrow array: Arrow input cast if needed, else each record's mapping or pairs."""
    import pyarrow as pa

    if isinstance(headers, pa.ChunkedArray):
        headers = headers.chunk(0) if headers.num_chunks == 1 else headers.combine_chunks()
    if isinstance(headers, pa.Array):
        if not headers.type.equals(headers_type()):
            try:
                headers = headers.cast(headers_type())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TypeError(f"headers must be a pyarrow array of {headers_type()}, not {headers.type}") from exc
        return headers
    if isinstance(headers, str | bytes | Mapping) or not isinstance(headers, Iterable):
        raise TypeError(f"headers must be one mapping or sequence of pairs per record, not {type(headers).__name__}")
    rows = headers if isinstance(headers, list | tuple) else list(headers)
    try:
        return pa.array(rows, type=headers_type())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError):
        pass  # mappings: converted to pairs below
    try:
        return pa.array([list(row.items()) if isinstance(row, Mapping) else row for row in rows], type=headers_type())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError) as exc:
        raise TypeError(
            f"each record's headers must be a mapping or a sequence of (str, bytes | str | None) pairs: {exc}"
        ) from exc


def timestamps_column(timestamps: BulkTimestamps, n: int) -> int | Int64Array:
    """One timestamp for every record, or an int64 array of ``n``: milliseconds since the epoch."""
    import numpy as np
    import pyarrow as pa

    if timestamps is None or isinstance(timestamps, int | datetime):
        return to_timestamp_ms(timestamps)
    if isinstance(timestamps, pa.ChunkedArray | pa.Array):
        arrow: Any = timestamps.combine_chunks() if isinstance(timestamps, pa.ChunkedArray) else timestamps
        if arrow.null_count:
            raise ValueError("timestamps must not be null")
        if pa.types.is_timestamp(arrow.type):
            arrow = arrow.cast(pa.timestamp("ms", tz=arrow.type.tz), safe=False).cast(pa.int64())
        elif not pa.types.is_integer(arrow.type):
            raise TypeError(f"timestamps must be integer milliseconds or Arrow timestamps, not {arrow.type}")
        array = arrow.to_numpy(zero_copy_only=False)
    elif isinstance(timestamps, str | bytes) or not isinstance(timestamps, Iterable):
        raise TypeError(
            f"timestamps must be int milliseconds, a sequence of them or None, not {type(timestamps).__name__}"
        )
    else:
        array = np.asarray(timestamps if isinstance(timestamps, list | tuple | np.ndarray) else list(timestamps))
        if array.dtype.kind == "M":
            array = array.astype("datetime64[ms]")
    if array.dtype.kind not in "iuM" or array.ndim != 1:
        raise TypeError(f"timestamps must be integer milliseconds since the epoch, got an array of {array.dtype}")
    result = np.ascontiguousarray(array.astype(np.int64, copy=False))
    if result.shape != (n,):
        raise ValueError(f"timestamps has {result.size} entries for {n} records")
    if n and int(result.min()) < 0:
        raise ValueError("timestamps must be >= 0 ms since the epoch")
    return result
