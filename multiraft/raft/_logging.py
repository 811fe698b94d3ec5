"""Loggers for the Raft core: structlog events routed through stdlib ``logging`` (no I/O of its own).

Nothing reaches stdout, and nothing is shown below WARNING until the application configures logging
(``multiraft.logging.configure_logging`` renders these events as key=value or JSON).
"""

from __future__ import annotations

import logging

import structlog

_PROCESSORS: list[structlog.typing.Processor] = [
    structlog.stdlib.filter_by_level,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
]


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(name), processors=_PROCESSORS, wrapper_class=structlog.stdlib.BoundLogger
    )
    return logger
