"""The ``multiraft`` data source: one class that hands out readers (``_source``) and writers (``_sink``)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

__all__ = ["MultiraftDataSource"]


class MultiraftDataSource(DataSource):
    """``format("multiraft")``: read topics (batch and micro-batch) and write rows back."""

    @classmethod
    def name(cls) -> str:
        return "multiraft"

    def schema(self) -> StructType:
        from spark_connector._source import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_connector._source import MultiraftBatchReader

        return MultiraftBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802  (pyspark's name)
        from spark_connector._source import MultiraftStreamReader

        return MultiraftStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_connector._sink import MultiraftBatchWriter

        return MultiraftBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        from spark_connector._sink import MultiraftStreamWriter

        return MultiraftStreamWriter(self.options, schema, overwrite)
