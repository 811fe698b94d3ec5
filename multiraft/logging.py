"""Structured logging, configured once per process.

Library modules log through :func:`get_logger` (structlog events carried by stdlib ``logging``, so a
library user who configures nothing sees nothing on stdout); entry points (the CLI, a node process, a
benchmark) call :func:`configure_logging` once. Humans get ``key=value`` lines on stderr; machines get one
JSON object per line with ``json=True`` (or ``MULTIRAFT_LOG_FORMAT=json``). Records from the standard
``logging`` module (grpc, py4j) go through the same renderer.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import structlog

from storage._logging import get_logger

__all__ = ["configure_logging", "get_logger"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str | None = None, *, json: bool | None = None, stream: TextIO | None = None) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr by default).

    ``level`` defaults to ``MULTIRAFT_LOG_LEVEL`` or ``info``; ``json`` defaults to
    ``MULTIRAFT_LOG_FORMAT == "json"``.
    """
    level_name = (level or os.environ.get("MULTIRAFT_LOG_LEVEL") or "info").lower()
    if level_name not in _LEVELS:
        raise ValueError(f"log level must be one of {sorted(_LEVELS)}, not {level_name!r}")
    if json is None:
        json = os.environ.get("MULTIRAFT_LOG_FORMAT", "").lower() == "json"
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.processors.LogfmtRenderer(key_order=["timestamp", "level", "logger", "event"])
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level_name])
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
