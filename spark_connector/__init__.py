"""Spark Structured Streaming source and sink for multiraft (PySpark Python Data Source API).

>>> import spark_connector                                                   # doctest: +SKIP
>>> spark_connector.register(spark)                                          # doctest: +SKIP
>>> spark.readStream.format("multiraft").option("bootstrap", "127.0.0.1:9092").option("subscribe", "events").load()

The options mirror Spark's Kafka source and sink (docs/spark.md). This package talks to the cluster only
through the public client API, :mod:`multiraft`.
"""

from __future__ import annotations

from typing import Any

from spark_connector._datasource import MultiraftDataSource
from spark_connector.errors import DataLossError
from spark_connector.session import local_session

__all__ = ["MultiraftDataSource", "DataLossError", "register", "local_session"]


def register(spark: Any) -> None:
    """Register the ``multiraft`` data source with a SparkSession (idempotent)."""
    spark.dataSource.register(MultiraftDataSource)
