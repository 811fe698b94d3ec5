"""How every servicer answers: the request held to its limits (:mod:`rpc.server.limits`), then any error as a
precise gRPC status. This is the server's one mapping of internal errors to wire errors: a
:class:`multiraft.errors.MultiraftError` travels as its status (``rpc.proto.status``); anything unexpected is
logged with the request's shape (never its payload) and answered INTERNAL, and the node keeps serving.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from multiraft.errors import InvalidArgumentError, MultiraftError
from multiraft.logging import get_logger
from rpc.proto.status import to_status
from rpc.server.limits import check_request

__all__ = ["mapped", "unexpected", "invalid", "Handler"]

log = get_logger(__name__)


Request = TypeVar("Request")


Response = TypeVar("Response")


Handler = Callable[[Any, Request, grpc.aio.ServicerContext[Request, Response]], Awaitable[Response]]


def mapped(handler: Handler[Request, Response]) -> Handler[Request, Response]:
    """Hold the request to the limits, then answer its error (if any) as a precise status: one request's
    failure, whatever it is, fails that request only."""

    @wraps(handler)
    async def wrapper(self: Any, request: Request, context: grpc.aio.ServicerContext[Request, Response]) -> Response:
        try:
            check_request(request, self._limits)  # type: ignore[arg-type]
            return await handler(self, request, context)
        except MultiraftError as exc:
            error = exc
        except Exception as exc:
            error = unexpected(handler.__name__, request, exc)
        await context.abort_with_status(to_status(error))  # type: ignore[attr-defined]
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    return wrapper


def unexpected(method: str, request: object, exc: Exception) -> MultiraftError:
    """Log a bug met while serving ``request`` with the request's shape (never its payload), as INTERNAL."""
    log.exception("request failed unexpectedly", method=method, error=repr(exc), **_shape(request))
    return MultiraftError(f"internal error in {method}: {exc!r}")


def _shape(request: object) -> dict[str, object]:
    """The request's type, size and repeated-field counts: enough to reproduce the failure's scale."""
    if not isinstance(request, Message):
        return {"request": type(request).__name__}
    counts = {d.name: len(v) for d, v in request.ListFields() if d.is_repeated}
    return {"request": type(request).__name__, "request_bytes": request.ByteSize(), "items": counts}


def invalid(message: str, field: str) -> MultiraftError:
    return InvalidArgumentError(message, field=field)
