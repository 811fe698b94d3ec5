"""Spark Structured Streaming source and sink for multiraft (PySpark Python Data Source API)."""
