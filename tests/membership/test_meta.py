"""MemberMeta: what a member tells the cluster about itself, validated field by field."""

from __future__ import annotations

from typing import Any

import pytest

from membership import MemberMeta, MetadataError


def test_valid_metadata_keeps_its_fields() -> None:
    meta = MemberMeta(7, "10.0.0.7:9092", "[::1]:9093", rack="r1", capacity=2.5)
    assert (meta.node_id, meta.client_addr, meta.peer_addr, meta.rack, meta.capacity) == (
        7,
        "10.0.0.7:9092",
        "[::1]:9093",
        "r1",
        2.5,
    )


@pytest.mark.parametrize(
    ("changes", "field_name"),
    [
        ({"node_id": 0}, "node_id"),
        ({"node_id": -3}, "node_id"),
        ({"node_id": 2**64}, "node_id"),
        ({"node_id": True}, "node_id"),
        ({"client_addr": "no-port"}, "client_addr"),
        ({"client_addr": "host:0"}, "client_addr"),
        ({"client_addr": "host:70000"}, "client_addr"),
        ({"client_addr": ":9092"}, "client_addr"),
        ({"peer_addr": "::1:9093"}, "peer_addr"),
        ({"peer_addr": "host name:1"}, "peer_addr"),
        ({"peer_addr": "h" * 300 + ":1"}, "peer_addr"),
        ({"rack": "r" * 256}, "rack"),
        ({"host": "h" * 65}, "host"),
        ({"host": "é" * 33}, "host"),
        ({"host": 7}, "host"),
        ({"capacity": 0.0}, "capacity"),
        ({"capacity": -1.0}, "capacity"),
        ({"capacity": float("nan")}, "capacity"),
        ({"capacity": float("inf")}, "capacity"),
        ({"capacity": "2"}, "capacity"),
    ],
)
def test_bad_metadata_is_refused_naming_the_field(changes: dict[str, Any], field_name: str) -> None:
    fields = {"node_id": 1, "client_addr": "127.0.0.1:9092", "peer_addr": "127.0.0.1:9093", **changes}
    with pytest.raises(MetadataError) as caught:
        MemberMeta(**fields)
    assert caught.value.field == field_name
