"""The quickstart's pieces that need neither a cluster nor Spark: event generation and the output checks.

The whole pipeline runs as ``scripts/quickstart`` (minutes); these tests keep its parts honest in milliseconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from _quickstart_events import JITTER_MS, Clock, end_of_stream_marker, event_chunk
from _quickstart_spark import offsets_total
from _quickstart_verify import check_events_topic, check_windows

pytestmark = pytest.mark.spark

FIELDS = {"event_id", "user_id", "session_id", "page", "action", "referrer", "ts"}


def _clock(events: int = 1_000) -> Clock:
    return Clock(t0_ms=1_700_000_040_000, span_ms=10 * 60_000, events=events)


def test_event_chunk_is_json_keyed_by_user_in_event_time_order() -> None:
    clock = _clock()
    keys, values = event_chunk(100, 50, clock, np.random.default_rng(1))
    assert len(keys) == len(values) == 50
    events = [json.loads(v) for v in values.to_pylist()]
    assert all(set(e) == FIELDS for e in events)
    assert [e["event_id"] for e in events] == [f"e{i:09d}" for i in range(100, 150)]
    assert keys.to_pylist() == [e["user_id"] for e in events]
    times = [datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp() * 1000 for e in events]
    # Event time follows the sequence number, out of order by at most the jitter.
    for index, ms in zip(range(100, 150), times, strict=True):
        base = clock.at(np.array([index]))[0]
        assert base <= ms < base + JITTER_MS
    assert max(times) < clock.end_ms


def test_chunks_cover_the_span_and_the_marker_comes_after_every_window() -> None:
    clock = _clock(events=2_000)
    _, last = event_chunk(1_999, 1, clock, np.random.default_rng(2))
    last_ms = datetime.fromisoformat(json.loads(last[0].as_py())["ts"].replace("Z", "+00:00")).timestamp() * 1000
    assert clock.t0_ms + clock.span_ms - 60_000 < last_ms < clock.end_ms
    key, value = end_of_stream_marker(clock, watermark_delay_ms=300_000)
    marker = json.loads(value)
    assert key == "end-of-stream" and "event_id" not in marker
    marker_ms = datetime.fromisoformat(marker["ts"].replace("Z", "+00:00")).timestamp() * 1000
    # The watermark after the marker (its time minus the delay) passes the end of the last window.
    assert marker_ms - 300_000 >= clock.end_ms // 60_000 * 60_000 + 60_000


def test_offsets_total_sums_kafka_style_offsets() -> None:
    assert offsets_total('{"events": {"0": 42, "1": 7}}') == 49
    assert offsets_total({"events": {"0": 1}, "other": {"3": 2}}) == 3
    assert offsets_total(None) == 0
    assert offsets_total("") == 0


def test_check_events_topic_counts_events_ids_and_markers() -> None:
    _, values = event_chunk(0, 20, _clock(), np.random.default_rng(3))
    _, marker = end_of_stream_marker(_clock(), 300_000)
    duplicated = [*values.to_pylist(), values[0].as_py(), marker]
    table = pa.table({"value": pa.array([v.encode() for v in duplicated], pa.binary())})
    check = check_events_topic(table)
    assert (check.records, check.events, check.distinct_event_ids, check.markers) == (22, 21, 20, 1)


def test_check_windows_takes_the_latest_value_per_key() -> None:
    def record(partition: int, offset: int, key: str, start: str, events: int) -> dict[str, object]:
        value = {"window_start": start, "window_end": "", "page": "/", "action": "view", "events": events}
        return {"partition": partition, "offset": offset, "key": key.encode(), "value": json.dumps(value).encode()}

    rows = [
        record(0, 0, "a", "12:00", 5),
        record(0, 1, "a", "12:00", 7),  # a later value for the same key replaces the first
        record(1, 0, "b", "12:01", 3),
    ]
    table = pa.Table.from_pylist(rows)
    check = check_windows(table)
    assert (check.records, check.distinct_keys, check.windows, check.summed_events) == (3, 2, 2, 10)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.parametrize("flags", [[], ["--secure"]], ids=["plaintext", "secure"])
def test_the_quickstart_passes_end_to_end_on_a_small_stream(tmp_path: Path, flags: list[str]) -> None:
    """The README's main command, small: cluster, producer, Spark job, node kill, checks (2-4 minutes); with
    --secure over TLS, as a producer and a Spark principal whose ACLs the run shows holding."""
    root = Path(__file__).resolve().parents[2]
    environment = {
        **os.environ,
        "QUICKSTART_EVENTS": "20000",
        "QUICKSTART_SECONDS": "15",
        "QUICKSTART_DIR": str(tmp_path / "quickstart"),
    }
    result = subprocess.run(
        [str(root / "scripts" / "quickstart"), *flags],
        check=False,
        env=environment,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "quickstart passed" in result.stdout
    if flags:
        assert "clickstream may not read events; spark may" in " ".join(result.stdout.split())
