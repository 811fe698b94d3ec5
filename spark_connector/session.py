"""A local SparkSession with the ``multiraft`` source and sink registered: the one the tests, the benchmarks and
the quickstart start, with the settings that keep Spark light on a small machine.

>>> from spark_connector import local_session                                # doctest: +SKIP
>>> spark = local_session("my-job")                                          # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from spark_connector._datasource import MultiraftDataSource

__all__ = ["local_session"]

# What every local session gets: no UI or console progress bar, two shuffle partitions for two cores, UTC
# timestamps, a small-heap garbage collector, reused Python workers, and a bound on how long stopping a
# streaming query may wait for its thread (Spark's default waits forever).
_LIGHT_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopTimeout": "10s",
}
_SERIAL_GC = "-XX:+UseSerialGC"
_C1_ONLY = "-XX:TieredStopAtLevel=1"


def local_session(
    app_name: str,
    *,
    quick_jit: bool = True,
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Start (or get) a ``local[2]`` SparkSession and register the ``multiraft`` data source with it.

    Spark's Python workers, and the JVM's data-source planner, run this interpreter (``sys.executable``), where
    multiraft and the connector are installed: the session sets ``PYSPARK_PYTHON`` and
    ``PYSPARK_DRIVER_PYTHON`` to it before the JVM starts (which inherits them). The driver binds to
    127.0.0.1 unless ``SPARK_LOCAL_IP`` says otherwise.

    Args:
        app_name: Spark's application name.
        quick_jit: run the JVM with its quick (C1) compiler only: it starts sooner and spends less CPU
            compiling, at some cost in peak speed. Tests and the quickstart want that; benchmarks pass False
            to measure the fully compiled code.
        conf: further Spark settings, applied after (and over) the light ones.
    """
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_options = f"{_C1_ONLY} {_SERIAL_GC}" if quick_jit else _SERIAL_GC
    settings = {**_LIGHT_CONF, "spark.driver.extraJavaOptions": java_options, **(conf or {})}
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(MultiraftDataSource)
    return session
