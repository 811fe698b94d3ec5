"""What a streaming query's start asks of the source: answers that stay put within one run."""

from __future__ import annotations

import pytest

from multiraft import Producer
from spark_connector._source import MultiraftStreamReader, source_schema
from tests.integration._helpers import Cluster

pytestmark = pytest.mark.spark


def test_the_initial_offset_is_decided_once_per_query_run(shared_cluster: Cluster) -> None:
    """Spark asks for it when it plans the first batch and again when it reads that batch: records that
    arrive in between must not move the first batch's start (nor cost another look at the cluster)."""
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("start-once", 1, 3)
    with Producer(bootstrap) as producer:
        producer.send_batch("start-once", [b"before"] * 3, partition=0).result(30)
        reader = MultiraftStreamReader(
            {"bootstrap": bootstrap, "subscribe": "start-once", "startingOffsets": "latest"}, source_schema({})
        )
        try:
            first = reader.initialOffset()
            producer.send_batch("start-once", [b"after"] * 2, partition=0).result(30)
            assert reader.initialOffset() == first == {"start-once": {"0": 3}}
        finally:
            reader.stop()
