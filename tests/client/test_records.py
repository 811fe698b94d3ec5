"""What ``poll()`` hands out: one immutable Record per decoded row, with its topic, partition, offset,
timestamp, key, value and headers, in offset order across the chunks of a decoded fetch; and what
``poll_arrow()`` hands out: the same rows as one table with topic and partition columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from multiraft import Record, TopicPartition
from rpc.client._consumer_tables import arrow_schema, as_records, as_table
from storage import decode_batches, encode_batch
from storage._batch_decode import SHARED_CHUNK_BYTES

TP = TopicPartition("events", 3)
BIG = b"v" * 1024
MANY = SHARED_CHUNK_BYTES // len(BIG) + 1


def _fetched() -> pa.Table:
    """Three batches (a large one, a small keyed one with headers, a large one): three chunks."""
    first = encode_batch([BIG] * MANY, timestamps_ms=1_000, base_offset=0)
    second = encode_batch(
        [b"a", None],
        keys=[b"k", None],
        headers=[[("h", b"1"), ("g", None)], None],
        timestamps_ms=[7, 9],
        base_offset=MANY,
    )
    third = encode_batch([BIG] * MANY, timestamps_ms=2_000, base_offset=MANY + 2)
    return decode_batches(first + second + third, include_headers=True)


def test_every_row_becomes_a_record_with_its_fields_in_offset_order() -> None:
    records = as_records([(TP, _fetched())])
    assert [r.offset for r in records] == list(range(2 * MANY + 2))
    assert records[0] == Record("events", 3, 0, 1_000, None, BIG, ())
    assert records[MANY] == Record("events", 3, MANY, 7, b"k", b"a", (("h", b"1"), ("g", None)))
    assert records[MANY + 1] == Record("events", 3, MANY + 1, 9, None, None, ())
    assert records[-1].timestamp_ms == 2_000 and records[-1].topic_partition == TP


def test_a_record_is_immutable_and_hashable() -> None:
    record = as_records([(TP, _fetched())])[MANY]
    with pytest.raises(AttributeError):
        record.value = b"changed"  # type: ignore[misc]
    assert hash(record) == hash(Record(*record))
    assert record._replace(value=b"b").value == b"b"


def test_poll_arrow_rows_carry_their_topic_and_partition() -> None:
    other = TopicPartition("ümlaut", 0)
    fetched = _fetched()
    table = as_table([(TP, fetched), (other, fetched.slice(0, 2))])
    table.validate(full=True)
    assert table.schema == arrow_schema()
    assert table.column("topic").to_pylist() == ["events"] * fetched.num_rows + ["ümlaut"] * 2
    assert table.column("partition").to_pylist() == [3] * fetched.num_rows + [0, 0]
    assert table.column("value").to_pylist()[: MANY + 2] == [BIG] * MANY + [b"a", None]


def test_an_empty_poll_is_an_empty_table_and_no_records() -> None:
    assert as_table([]).num_rows == 0
    assert as_records([]) == []


def test_a_slice_of_a_fetch_keeps_its_own_headers_and_timestamps_and_none_of_its_neighbours() -> None:
    fetched = _fetched()
    before = fetched.slice(MANY - 2, 2)  # ends just before the rows with headers
    with_headers = fetched.slice(MANY - 1, 3)  # the last large row, then the two small ones
    after = fetched.slice(MANY + 1, 3)  # from the headerless small row into the third batch
    assert [r.headers for r in as_records([(TP, before)])] == [(), ()]
    assert [(r.timestamp_ms, r.headers) for r in as_records([(TP, with_headers)])] == [
        (1_000, ()),
        (7, (("h", b"1"), ("g", None))),
        (9, ()),
    ]
    assert [(r.offset, r.timestamp_ms, r.headers) for r in as_records([(TP, after)])] == [
        (MANY + 1, 9, ()),
        (MANY + 2, 2_000, ()),
        (MANY + 3, 2_000, ()),
    ]
    assert as_records([(TP, fetched.slice(5, 0))]) == []
