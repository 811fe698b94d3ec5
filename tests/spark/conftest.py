"""One local SparkSession for the whole run (``local[2]``, UI off) and real 3-node clusters on 127.0.0.1.

Spark tests are marked ``spark``; they need Java 17. The session is started once because it costs 5-12 s.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import cluster, cluster_factory, shared_cluster  # noqa: F401

pytestmark = pytest.mark.spark


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


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


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if shutil.which("java") is None:
        pytest.skip("Spark tests need Java 17 on PATH")
    # Spark's Python workers run PYSPARK_PYTHON (default: python3 on PATH), which must see this venv's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = local_session("multiraft-tests")
    try:
        yield session
    finally:
        session.stop()
