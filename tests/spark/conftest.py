"""One local SparkSession for the whole run (``local[2]``, UI off) and real 3-node clusters on 127.0.0.1.

Spark tests are marked ``spark``; they need Java 17. The session is started once because it costs 5-12 s.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from spark_connector import local_session
from tests.integration._helpers import cluster, cluster_factory, shared_cluster  # noqa: F401

pytestmark = pytest.mark.spark


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if shutil.which("java") is None:
        pytest.skip("Spark tests need Java 17 on PATH")
    session = local_session("multiraft-tests")
    try:
        yield session
    finally:
        session.stop()
