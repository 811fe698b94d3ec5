"""The sink's pieces that need no SparkSession: option parsing, and the cutting of a task's rows into runs,
which must not depend on how Spark happened to batch them (a replay must cut at the same places)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from multiraft import ConfigError
from spark_connector._sink import _runs, _sorted, parse_sink_options


def _batches(values: list[bytes], sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for size in sizes:
        out.append(pa.record_batch({"value": pa.array(values[start : start + size], pa.binary())}))
        start += size
    assert start == len(values)
    return out


def test_runs_do_not_depend_on_input_batch_boundaries() -> None:
    values = [b"%d" % i for i in range(1_000)]
    expected = None
    for sizes in ([1_000], [1] * 1_000, [333, 0, 667], [625, 375]):
        runs = [run.column("value").to_pylist() for run in _runs(iter(_batches(values, sizes)), 300)]
        assert [len(r) for r in runs] == [300, 300, 300, 100]
        assert expected is None or runs == expected
        expected = runs


def test_sorted_rows_give_the_same_runs_in_any_order() -> None:
    keys = [b"k%d" % (i % 7) for i in range(500)]
    values = [b"v%d" % i for i in range(500)]
    forward = pa.record_batch({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
    backward = pa.record_batch({"key": pa.array(keys[::-1], pa.binary()), "value": pa.array(values[::-1], pa.binary())})
    one = [r.to_pylist() for r in _runs(_sorted(iter([forward])), 64)]
    two = [r.to_pylist() for r in _runs(_sorted(iter([backward.slice(0, 100), backward.slice(100)])), 64)]
    assert one == two
    assert [row["key"] for run in one for row in run] == sorted(keys)


def test_options() -> None:
    options = parse_sink_options(
        {"BOOTSTRAP": " 127.0.0.1:7000 ", "topic": "t", "lingerMs": "2", "batch_bytes": "4096", "sortRows": "TRUE"}
    )
    assert options.bootstrap == "127.0.0.1:7000" and options.topic == "t" and options.sort_rows
    assert options.producer_settings() == {"batch_bytes": 4096, "linger_ms": 2.0}
    with pytest.raises(ConfigError, match="bootstrap"):
        parse_sink_options({"kafka.bootstrap.servers": "x"})
    with pytest.raises(ConfigError, match="batch_bytes"):
        parse_sink_options({"bootstrap": "h:1", "batchBytes": "lots"})
    with pytest.raises(ConfigError, match="sortRows"):
        parse_sink_options({"bootstrap": "h:1", "sortRows": "yes"})
