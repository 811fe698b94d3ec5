"""What the Spark benchmarks share: one local SparkSession, shuffled timed repetitions against a baseline
case, and the report."""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
    "spark.python.worker.reuse": "true",
}


def start_spark(app_name: str) -> Any:
    """A ``local[2]`` SparkSession, UI off, with the ``multiraft`` data source registered."""
    from pyspark.sql import SparkSession

    import spark_connector

    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    return spark


def timed(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def repeat(
    cases: Mapping[str, Callable[[], float]], reps: int, seed: int, baseline: str = "parquet"
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run every case (each returns its rows/s) ``reps`` times in a shuffled order: (rates, ratios to the
    baseline case of the same repetition)."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    shuffle = random.Random(seed)
    for _ in range(reps):
        order = list(cases)
        shuffle.shuffle(order)
        rep = {name: cases[name]() for name in order}
        for name in cases:
            rates[name].append(rep[name])
            ratios[name].append(rep[name] / rep[baseline])
    return rates, ratios


def summarise(rates: Mapping[str, list[float]], ratios: Mapping[str, list[float]]) -> dict[str, Any]:
    return {
        name: {
            "median_rows_per_s": statistics.median(rates[name]),
            "rows_per_s": rates[name],
            "median_ratio_to_parquet": statistics.median(ratios[name]),
        }
        for name in rates
    }


def report(result: Mapping[str, Any], as_json: bool) -> None:
    """Print ``result``: as JSON, or one line per case under a header of the run's parameters."""
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['rows']:,} rows of {result['value_bytes']} B, {result['partitions']} partitions, "
        f"RF {result['replication_factor']}, {result['reps']} reps"
    )
    for name, case in result["cases"].items():
        print(
            f"  {name:18s} {case['median_rows_per_s']:>12,.0f} rows/s   "
            f"ratio to parquet {case['median_ratio_to_parquet']:.2f}"
        )
