"""One node-to-node request whose answer the caller needs: the body of an OK answer, or the error as raised."""

from __future__ import annotations

from multiraft.errors import UnavailableError
from multiraft.node.peer.messages import STATUS_OK, RequestKind, decode_error
from multiraft.node.protocols import PeerCaller

__all__ = ["ask_peer"]

_MIN_TIMEOUT_S = 0.01


async def ask_peer(
    peers: PeerCaller, node: int, kind: RequestKind, body: bytes, timeout_s: float, *, what: str
) -> bytes:
    """The answer's body; UnavailableError if ``node`` (``what``, for messages) cannot be reached, or the
    error it answered with, as the same class."""
    try:
        status, answer = await peers.call(node, kind, body, max(_MIN_TIMEOUT_S, timeout_s))
    except (ConnectionError, TimeoutError) as exc:
        raise UnavailableError(f"{what} {node} unreachable: {exc or type(exc).__name__}") from exc
    if status != STATUS_OK:
        raise decode_error(answer, source=f"{what} {node}")
    return answer
