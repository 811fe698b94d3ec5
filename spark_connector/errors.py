"""Errors of the Spark connector: the client's hierarchy, plus one of its own.

::

    multiraft.MultiraftError
    ├── ConfigError          a bad option (the message starts with the option's name)
    ├── ...                  every client error (UnknownTopicError, UnavailableError, ...) passes through
    └── DataLossError        records a query had still to read are gone (failOnDataLoss=true)
"""

from __future__ import annotations

from multiraft import MultiraftError

__all__ = ["DataLossError"]


class DataLossError(MultiraftError):
    """Records the query had still to read are gone (retention deleted them, or the topic was deleted).

    ``metadata`` holds ``topic``, ``partition``, ``from_offset`` and ``to_offset`` (the lost range,
    ``to_offset`` exclusive) when one partition is concerned.
    """

    reason = "DATA_LOSS"
