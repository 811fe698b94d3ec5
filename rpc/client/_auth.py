"""Client credentials: a SCRAM-SHA-256 exchange over ``Security.Authenticate`` gets a bearer token, which every
call then carries as ``authorization: Bearer <token>`` metadata (gRPC interceptors, sync and asyncio).

The token is renewed before it expires (once three quarters of its life has passed); a unary call answered
"expired token" is sent once more with a fresh one, so a client outliving many tokens never fails for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import grpc

from multiraft.errors import AuthenticationFailedError, ConnectionFailedError, MultiraftError
from multiraft.security.scram import MECHANISM, ScramClient
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_rpc_error

__all__ = ["TokenSource", "AuthInterceptor", "aio_interceptors"]

_RENEW_AT = 0.75  # of a token's lifetime


class TokenSource:
    """Thread-safe: the current token of ``user``, authenticating with the first node of ``addresses()`` that
    answers, over channels from ``open_channel`` (without credentials)."""

    def __init__(
        self,
        user: str,
        password: str,
        addresses: Callable[[], Sequence[str]],
        open_channel: Callable[[str], grpc.Channel],
        timeout_s: float = 10.0,
    ) -> None:
        if not user:
            raise ValueError("user must not be empty")
        if not password:
            raise ValueError("password must not be empty")
        self.user = user
        self._password = password
        self._addresses = addresses
        self._open_channel = open_channel
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._token = ""
        self._renew_at = 0.0  # time.time() after which the token is renewed
        self.authentications = 0  # how many exchanges this source ran (tests and logs)

    def __repr__(self) -> str:
        return f"TokenSource(user={self.user!r})"

    def cached(self) -> str | None:
        """The current token if it needs no renewal yet (no I/O)."""
        return self._token if self._token and time.time() < self._renew_at else None

    def token(self) -> str:
        """The current token, authenticating first when there is none or it is due for renewal."""
        with self._lock:
            if not self._token or time.time() >= self._renew_at:
                self._authenticate()
            return self._token

    def invalidate(self, token: str) -> None:
        """Forget ``token`` (the cluster refused it), so that the next call authenticates again."""
        with self._lock:
            if self._token == token:
                self._token, self._renew_at = "", 0.0

    def _authenticate(self) -> None:
        last: MultiraftError = ConnectionFailedError("no node to authenticate with")
        for address in self._addresses():
            try:
                self._exchange(pb_grpc.SecurityStub(self._open_channel(address)))
                return
            except grpc.RpcError as exc:
                last = from_rpc_error(exc)
                if isinstance(last, AuthenticationFailedError) or not last.retriable:
                    raise last from None
        raise last

    def _exchange(self, stub: pb_grpc.SecurityStub) -> None:
        scram = ScramClient(self.user, self._password)
        started = time.time()
        first = stub.Authenticate(
            pb.AuthenticateRequest(mechanism=MECHANISM, message=scram.first()), timeout=self._timeout_s
        )
        final = stub.Authenticate(
            pb.AuthenticateRequest(
                mechanism=MECHANISM, session_id=first.session_id, message=scram.final(first.message)
            ),
            timeout=self._timeout_s,
        )
        scram.verify(final.message)
        lifetime = max(0.0, final.token_expires_at_ms / 1000 - started)
        self._token, self._renew_at = final.token, started + _RENEW_AT * lifetime
        self.authentications += 1


def _with_token(metadata: Any, token: str) -> list[tuple[str, str]]:
    kept = [(k, v) for k, v in (metadata or ()) if k != "authorization"]
    return [*kept, ("authorization", f"Bearer {token}")]


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


def _expired(outcome: Any) -> bool:
    try:
        return bool(outcome.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in (outcome.details() or ""))
    except Exception:  # not a finished call
        return False


class AuthInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[type-arg]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.StreamStreamClientInterceptor,  # type: ignore[type-arg]
):
    """Adds the bearer token to every call of a sync channel."""

    def __init__(self, source: TokenSource) -> None:
        self._source = source

    def _details(self, details: Any, token: str) -> _Details:
        return _Details(
            details.method,
            details.timeout,
            _with_token(details.metadata, token),
            details.credentials,
            details.wait_for_ready,
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        token = self._source.token()
        outcome = continuation(self._details(client_call_details, token), request)
        if _expired(outcome):  # a clock ahead of ours, or a token key reset: once more with a new token
            self._source.invalidate(token)
            outcome = continuation(self._details(client_call_details, self._source.token()), request)
        return outcome

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details, self._source.token()), request)

    def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details, self._source.token()), request_iterator)

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details, self._source.token()), request_iterator)


async def _token(source: TokenSource) -> str:
    cached = source.cached()
    return cached if cached is not None else await asyncio.to_thread(source.token)


def _aio_details(details: Any, token: str) -> grpc.aio.ClientCallDetails:
    return grpc.aio.ClientCallDetails(
        details.method,
        details.timeout,
        grpc.aio.Metadata(*_with_token(details.metadata, token)),
        details.credentials,
        details.wait_for_ready,
    )


class _AioUnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    def __init__(self, source: TokenSource) -> None:
        self._source = source

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(_aio_details(client_call_details, await _token(self._source)), request)


class _AioUnaryStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    def __init__(self, source: TokenSource) -> None:
        self._source = source

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(_aio_details(client_call_details, await _token(self._source)), request)


class _AioStreamStream(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[type-arg]
    def __init__(self, source: TokenSource) -> None:
        self._source = source

    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await continuation(_aio_details(client_call_details, await _token(self._source)), request_iterator)


def aio_interceptors(source: TokenSource | None) -> list[Any]:
    """Interceptors for a ``grpc.aio`` channel that carry ``source``'s token (none without a source)."""
    if source is None:
        return []
    return [_AioUnaryUnary(source), _AioUnaryStream(source), _AioStreamStream(source)]
