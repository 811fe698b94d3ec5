"""The SparkSession settings of the Spark tests, shared with the driver processes some tests start."""

from __future__ import annotations

from typing import Any

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopTimeout": "10s",
}


def local_session(app_name: str) -> Any:
    """A local[2] SparkSession with the test settings and the multiraft source and sink registered."""
    from pyspark.sql import SparkSession

    import spark_connector

    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    return session
