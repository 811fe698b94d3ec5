"""The shared binary primitives: writer and reader are exact inverses in both byte orders, and the reader refuses
any truncated, overlong or lying input with :class:`BinaryDecodeError` naming the field and offset, never anything
else (no IndexError, no struct.error)."""

from __future__ import annotations

import math
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.binary import BIG, LITTLE, BinaryDecodeError, BinaryEncodeError, ByteOrder, Reader, Writer, decode

HEAD = struct.Struct("<BIq")

# One field: how to write it, how to read it back, and the strategy of its values.
Field = tuple[str, Callable[[Writer, Any], None], Callable[[Reader], Any], st.SearchStrategy[Any]]
TEXT = st.text(max_size=12)
FIELDS: list[Field] = [
    ("u8", lambda w, v: w.u8(v), lambda r: r.u8("u8"), st.integers(0, 2**8 - 1)),
    ("u16", lambda w, v: w.u16(v), lambda r: r.u16("u16"), st.integers(0, 2**16 - 1)),
    ("u32", lambda w, v: w.u32(v), lambda r: r.u32("u32"), st.integers(0, 2**32 - 1)),
    ("u64", lambda w, v: w.u64(v), lambda r: r.u64("u64"), st.integers(0, 2**64 - 1)),
    ("i64", lambda w, v: w.i64(v), lambda r: r.i64("i64"), st.integers(-(2**63), 2**63 - 1)),
    ("id", lambda w, v: w.i64(v), lambda r: r.id("id"), st.integers(0, 2**63 - 1)),
    ("f64", lambda w, v: w.f64(v), lambda r: r.f64("f64"), st.floats(allow_nan=False, allow_infinity=False)),
    ("flag", lambda w, v: w.flag(v), lambda r: r.flag("flag"), st.booleans()),
    ("struct", lambda w, v: w.struct(HEAD, *v), lambda r: r.struct(HEAD, "head"), st.tuples(
        st.integers(0, 255), st.integers(0, 2**32 - 1), st.integers(-(2**63), 2**63 - 1))),
    ("raw", lambda w, v: w.raw(v), lambda r: r.raw("raw"), st.binary(max_size=12)),
    ("raw1", lambda w, v: w.raw(v, width=1), lambda r: r.raw("raw1", width=1), st.binary(max_size=12)),
    ("text2", lambda w, v: w.text(v, width=2), lambda r: r.text("text2", width=2), TEXT),
    ("text", lambda w, v: w.text(v), lambda r: r.text("text"), TEXT),
    ("ints", lambda w, v: w.ints(v), lambda r: r.ints("ints"), st.lists(
        st.integers(-(2**63), 2**63 - 1), max_size=5).map(tuple)),
    ("texts", lambda w, v: w.texts(v), lambda r: r.texts("texts"), st.lists(TEXT, max_size=4).map(tuple)),
    ("mapping", lambda w, v: w.mapping(v), lambda r: r.mapping("mapping"), st.dictionaries(TEXT, TEXT, max_size=3)),
]  # fmt: skip
ORDERS = st.sampled_from([LITTLE, BIG])


@st.composite
def programs(draw: st.DrawFn) -> list[tuple[Field, Any]]:
    """A message: a list of fields and their values."""
    fields = draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=8))
    return [(field, draw(field[3])) for field in fields]


def _write(program: list[tuple[Field, Any]], order: ByteOrder) -> bytes:
    w = Writer(order)
    for (_, write, _, _), value in program:
        write(w, value)
    return w.bytes()


def _read(program: list[tuple[Field, Any]], data: bytes, order: ByteOrder) -> list[Any]:
    r = Reader(data, "probe", order=order)
    values = [read(r) for (_, _, read, _), _ in program]
    r.done()
    return values


@given(programs(), ORDERS)
def test_what_the_writer_writes_the_reader_reads_back(program: list[tuple[Field, Any]], order: ByteOrder) -> None:
    assert _read(program, _write(program, order), order) == [value for _, value in program]


@given(programs(), ORDERS, st.data())
def test_every_truncation_of_a_valid_encoding_raises_decode_error_only(
    program: list[tuple[Field, Any]], order: ByteOrder, data: st.DataObject
) -> None:
    encoded = _write(program, order)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(BinaryDecodeError) as raised:
        _read(program, encoded[:cut], order)
    assert raised.value.what == "probe" and 0 <= raised.value.offset <= cut


@given(programs(), ORDERS, st.binary(min_size=1, max_size=4))
def test_trailing_bytes_are_refused(program: list[tuple[Field, Any]], order: ByteOrder, trailing: bytes) -> None:
    encoded = _write(program, order)
    with pytest.raises(BinaryDecodeError, match=f"{len(trailing)} trailing bytes") as raised:
        _read(program, encoded + trailing, order)
    assert raised.value.offset == len(encoded)


@given(programs(), ORDERS, st.binary(max_size=64))
def test_any_bytes_read_as_any_message_decode_or_raise_decode_error_only(
    program: list[tuple[Field, Any]], order: ByteOrder, data: bytes
) -> None:
    try:
        _read(program, data, order)
    except BinaryDecodeError:
        pass


def test_the_byte_orders_and_length_widths_write_the_documented_bytes() -> None:
    little, big = Writer(LITTLE), Writer(BIG)
    for w in (little, big):
        w.u8(1)
        w.u16(0x0203)
        w.u32(0x04050607)
        w.i64(-2)
        w.text("ab", width=1)
        w.raw(b"c", width=2)
        w.text("d")
        w.ints([1])
    assert little.bytes().hex() == "010302070605" + "04" + "feffffffffffffff" + "026162" + "010063" + "0100000064" + (
        "01000000" + "0100000000000000"
    )
    assert big.bytes().hex() == "010203040506" + "07" + "fffffffffffffffe" + "026162" + "000163" + "0000000164" + (
        "00000001" + "0000000000000001"
    )


def test_an_error_names_the_message_the_field_and_the_offset() -> None:
    r = Reader(b"\x01\x00\x00\x00\x09\x00\x00", "probe")
    assert r.u32("first") == 1
    with pytest.raises(BinaryDecodeError) as raised:
        r.u32("second")
    assert (raised.value.what, raised.value.field, raised.value.offset) == ("probe", "second", 4)
    assert str(raised.value) == "malformed probe: second truncated: needs 4 bytes, 3 left (at byte 4)"


def test_a_nested_reader_reports_offsets_in_the_whole_input() -> None:
    r = Reader(b"\xaa\xbb" + b"\x05\x00\x00\x00", "probe")
    r.take(2, "skip")
    inner = r.sub(4, "body")
    with pytest.raises(BinaryDecodeError) as raised:
        inner.raw("payload")
    assert raised.value.offset == 6 and "runs past its message" in str(raised.value)


@pytest.mark.parametrize("read", [lambda r: r.raw("f"), lambda r: r.ints("f"), lambda r: r.texts("f")])
def test_a_length_or_count_that_lies_is_refused_without_allocating(read: Callable[[Reader], Any]) -> None:
    body = struct.pack("<I", 2**31) + bytes(10)
    tracemalloc.start()
    try:
        with pytest.raises(BinaryDecodeError, match=str(2**31)):
            read(Reader(body, "probe"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000


def test_values_over_their_maximum_length_are_refused_both_ways() -> None:
    with pytest.raises(BinaryEncodeError):
        Writer().text("abc", max_len=2)
    with pytest.raises(BinaryDecodeError, match="longer than 2"):
        Reader(b"\x03abc", "probe").text("f", width=1, max_len=2)


@pytest.mark.parametrize(
    "write",
    [
        lambda w: w.u8(256),
        lambda w: w.u32(-1),
        lambda w: w.u64(2**64),
        lambda w: w.i64(2**63),
        lambda w: w.raw(bytes(256), width=1),
        lambda w: w.ints([2**63]),
        lambda w: w.struct(HEAD, 1, 2),
        lambda w: w.u32("1"),
    ],
)
def test_a_value_that_does_not_fit_its_field_raises_encode_error(write: Callable[[Writer], None]) -> None:
    with pytest.raises(BinaryEncodeError):
        write(Writer())


@pytest.mark.parametrize(
    ("data", "read", "problem"),
    [
        (b"\x02", lambda r: r.flag("f"), "not 0 or 1"),
        (struct.pack("<q", -1), lambda r: r.id("f"), "must be >= 0"),
        (struct.pack("<d", math.nan), lambda r: r.f64("f"), "not a finite number"),
        (b"\x02\x00\x00\x00\xc3\x28", lambda r: r.text("f"), "not UTF-8"),
    ],
)
def test_values_out_of_their_domain_are_refused(data: bytes, read: Callable[[Reader], Any], problem: str) -> None:
    with pytest.raises(BinaryDecodeError, match=problem):
        read(Reader(data, "probe"))


def test_a_non_finite_number_is_read_when_the_codec_judges_it_itself() -> None:
    assert math.isinf(Reader(struct.pack(">d", math.inf), "probe", order=BIG).f64("f", finite=False))


def test_decode_reads_the_whole_input_and_slices_without_copying() -> None:
    data = bytearray(b"\x03\x00\x00\x00abc")
    view = decode(data, "probe", lambda r: r.raw_view("f"))
    data[4] = ord("z")
    assert bytes(view) == b"zbc"  # a view of the input, not a copy
    with pytest.raises(BinaryDecodeError, match="trailing"):
        decode(bytes(data) + b"!", "probe", lambda r: r.raw("f"))
