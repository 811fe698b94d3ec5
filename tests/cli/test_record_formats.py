"""What kcat and rpk users expect of produce and consume: format strings, headers in text, a JSON round trip
through a pipe, offset ranges; and ``topic describe`` of several topics and ``health``."""

from __future__ import annotations

import json

import pytest
import typer

from multiraft import Record
from multiraft.tools.cli._consume import bytes_of_json, format_string_formatter, json_bytes
from multiraft.tools.cli._input_format import format_string_parser
from tests.cli._helpers import invoke, invoked, ok, one_error_line, run_cli
from tests.integration._helpers import Cluster

_RECORD = Record("events", 2, 41, 1_700_000_000_123, b"user-1", b"clicked", (("src", b"web"), ("trace", b"a1")))


def test_a_format_string_prints_each_directive() -> None:
    line = format_string_formatter(r"%t %p/%o %k=%v [%h] %T %d %K %S 100%%\n")(_RECORD)
    assert line == b"events 2/41 user-1=clicked [src=web,trace=a1] 1700000000123 2023-11-14T22:13:20.123Z 6 7 100%\n"


def test_a_format_string_shows_absent_keys_and_values_as_length_minus_one() -> None:
    record = _RECORD._replace(key=None, value=None, headers=())
    assert format_string_formatter("%K %S [%k][%v][%h]")(record) == b"-1 -1 [][][]"


def test_an_unknown_directive_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(typer.BadParameter, match="unknown directive %x; known: %t %p %o"):
        format_string_formatter("%x")


@pytest.mark.parametrize("data", [None, b"text", b"\xff\xfe binary"])
def test_json_bytes_read_back_as_the_same_bytes(data: bytes | None) -> None:
    assert bytes_of_json(json_bytes(data), "value") == data


def test_json_bytes_of_another_type_are_refused() -> None:
    with pytest.raises(ValueError, match="value must be a string"):
        bytes_of_json(1, "value")


def test_an_input_format_string_reads_key_value_headers_timestamp_and_partition() -> None:
    parse = format_string_parser(r"%p|%T|%k\t%v|%h\n")
    assert parse(b"2|1700000000123|user-1\tclicked|src=web,trace=a1", [("via", b"cli")]) == (
        b"user-1",
        b"clicked",
        [("via", b"cli"), ("src", b"web"), ("trace", b"a1")],
        1_700_000_000_123,
        2,
    )


def test_the_last_field_of_an_input_format_takes_the_rest_of_the_line() -> None:
    assert format_string_parser("%k %v")(b"k1 a value with spaces", [])[:2] == (b"k1", b"a value with spaces")


@pytest.mark.parametrize(
    ("fmt", "line", "why"),
    [("%k %v", b"no-space-here", "does not have the shape"), ("%T %v", b"x v", "timestamp 'x' is not a whole number")],
)
def test_a_line_an_input_format_does_not_fit_says_why(fmt: str, line: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        format_string_parser(fmt)(line, [])


@pytest.mark.parametrize(
    ("fmt", "why"), [("%k %x", "unknown directive %x"), ("%v %v", "repeated directive %v"), ("%k", "needs its value")]
)
def test_a_bad_input_format_is_a_usage_error(fmt: str, why: str) -> None:
    with pytest.raises(typer.BadParameter, match=why):
        format_string_parser(fmt)


pytestmark_integration = pytest.mark.integration


@pytestmark_integration
def test_consume_json_piped_into_produce_json_copies_keys_values_headers_and_timestamps(
    shared_cluster: Cluster,
) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("originals", 1, 3)
    shared_cluster.create_topic("copies", 1, 3)
    ok(run_cli("produce", "originals", "-K", ":", "-H", "src=cli", bootstrap=bootstrap, stdin=b"a:one\nb:\xff\xfe\n"))
    originals = ok(run_cli("consume", "originals", "--format", "json", bootstrap=bootstrap))
    copied = run_cli("produce", "copies", "--format", "json", bootstrap=bootstrap, stdin=originals.encode())
    ok(copied)
    copies = ok(run_cli("consume", "copies", "--format", "json", bootstrap=bootstrap))

    def essence(text: str) -> list[tuple[object, ...]]:
        rows = [json.loads(line) for line in text.splitlines()]
        return [(r["key"], r["value"], r["headers"], r["timestamp"]) for r in rows]

    assert len(essence(originals)) == 2
    assert essence(copies) == essence(originals)


@pytestmark_integration
def test_produce_json_stops_at_a_line_that_is_no_record_and_says_which(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("json-in", 1, 3)
    stdin = b'{"key": "k", "value": "v"}\nnot json\n{"value": "never"}\n'
    error = one_error_line(
        run_cli("produce", "json-in", "--format", "json", bootstrap=shared_cluster.bootstrap, stdin=stdin)
    )
    assert error.startswith("error: line 2 is not a JSON record: ")
    assert error.endswith("(the input stopped there; 1 record before it was sent)")


@pytestmark_integration
def test_format_strings_headers_and_offset_ranges(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("ranged", 1, 3)
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(6))
    ok(run_cli("produce", "ranged", "-K", ":", "-H", "src=cli", bootstrap=bootstrap, stdin=lines))
    formatted = invoked(invoke("consume", "ranged", "-f", r"%p/%o %k=%v %h\n", "-o", "2:4", bootstrap=bootstrap))
    assert formatted == "0/2 k2=v2 src=cli\n0/3 k3=v3 src=cli\n"
    with_headers = invoked(invoke("consume", "ranged", "--print-headers", "-o", ":1", bootstrap=bootstrap))
    assert with_headers == "src=cli\tv0\n"
    refused = invoke("consume", "ranged", "-o", "1:3", "--follow", bootstrap=bootstrap)
    assert refused.exit_code == 2 and "a START:END range ends; --follow does not" in refused.output


@pytestmark_integration
def test_topic_describe_takes_several_names_and_patterns(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    for name in ("metrics-a", "metrics-b", "other"):
        shared_cluster.create_topic(name, 1, 3)
    out = invoked(invoke("topic", "describe", "other", "--regex", "metrics-.*", "--json", bootstrap=bootstrap))
    assert [json.loads(line)["name"] for line in out.splitlines()] == ["other", "metrics-a", "metrics-b"]
    none = invoke("topic", "describe", "-r", "nothing-.*", bootstrap=bootstrap)
    assert none.exit_code == 1


@pytestmark_integration
def test_health_says_a_serving_cluster_is_healthy(shared_cluster: Cluster) -> None:
    overview = json.loads(invoked(invoke("health", "--json", bootstrap=shared_cluster.bootstrap)))
    assert overview["healthy"] is True
    assert overview["nodes"] == [1, 2, 3] and overview["nodes_down"] == []
    text = invoked(invoke("health", bootstrap=shared_cluster.bootstrap))
    assert text.splitlines()[0].split() == ["Healthy:", "true"]


@pytestmark_integration
def test_from_partition_offset_pairs_start_each_partition_at_its_own_offset(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("per-partition", 3, 3)
    for p in (0, 1, 2):
        ok(run_cli("produce", "per-partition", "-p", str(p), bootstrap=bootstrap, stdin=b"a\nb\nc\n"))
    out = invoked(invoke("consume", "per-partition", "--from", "0=1,2=-1", "-f", r"%p/%o\n", bootstrap=bootstrap))
    assert sorted(out.splitlines()) == ["0/1", "0/2", "2/2"]  # partition 1 is not named, so not read


def test_a_one_byte_delimiter_splits_records_that_hold_newlines() -> None:
    import io

    from multiraft.tools.cli._produce import _lines

    stream = io.BufferedReader(io.BytesIO(b"line 1\nline 2\x00b\r\x00last"))
    assert [line for line, _ in _lines(stream, b"\x00")] == [b"line 1\nline 2", b"b\r", b"last"]


@pytestmark_integration
def test_produce_with_a_nul_delimiter_keeps_newlines_inside_records(shared_cluster: Cluster) -> None:
    shared_cluster.create_topic("multiline", 1, 3)
    ok(run_cli("produce", "multiline", "-D", r"\0", bootstrap=shared_cluster.bootstrap, stdin=b"a\nb\x00c\x00"))
    out = invoked(invoke("consume", "multiline", "--format", "json", bootstrap=shared_cluster.bootstrap))
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["a\nb", "c"]


@pytestmark_integration
def test_consume_as_a_group_member_with_kcats_minus_g(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("member-read", 1, 3)
    ok(run_cli("produce", "member-read", bootstrap=bootstrap, stdin=b"first\nsecond\n"))
    result = run_cli("consume", "member-read", "-G", "readers", "--from", "earliest", "--max", "2", bootstrap=bootstrap)
    assert ok(result) == "first\nsecond\n"
    described = json.loads(ok(run_cli("group", "describe", "readers", "--json", bootstrap=bootstrap)))
    assert {(p["partition"], p["committed"]) for p in described["partitions"]} == {(0, 2)}


@pytestmark_integration
def test_produce_reads_records_shaped_by_an_input_format_and_consume_prints_them_back(shared_cluster: Cluster) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("shaped", 2, 3)
    lines = b"1;k1;src=a;first value\n0;k2;;second\n"
    ok(run_cli("produce", "shaped", "--input-format", "%p;%k;%h;%v", bootstrap=bootstrap, stdin=lines))
    for partition, expected in ((1, "1 k1 [src=a] first value"), (0, "0 k2 [] second")):
        printed = ok(run_cli("consume", "shaped", "-p", str(partition), "-f", r"%p %k [%h] %v\n", bootstrap=bootstrap))
        assert printed.strip() == expected
