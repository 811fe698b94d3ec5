"""spark_connector.local_session: the one SparkSession builder of the tests, the benchmarks and the quickstart."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_BUILDS_A_SESSION = re.compile(r"SparkSession\.builder\s*\.\s*master\(")


def test_no_code_but_local_session_builds_a_local_spark_session() -> None:
    builders = [
        str(path.relative_to(ROOT))
        for folder in ("spark_connector", "multiraft", "tests", "benchmarks", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if _BUILDS_A_SESSION.search(path.read_text())
    ]
    assert builders == ["spark_connector/session.py"]


def test_local_session_runs_python_workers_on_this_interpreter_with_the_quick_jit(spark: Any) -> None:
    workers = spark.range(0, 2, numPartitions=2).rdd.map(lambda _: sys.executable).collect()
    assert workers == [sys.executable, sys.executable]
    java_options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert "-XX:TieredStopAtLevel=1" in java_options
    assert spark.sparkContext.getConf().get("spark.sql.streaming.stopTimeout") == "10s"
