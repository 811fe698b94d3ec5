"""Short-lived bearer tokens any node verifies: an HMAC-SHA256, under the cluster's token key (kept in the
controller's replicated state), over the principal, the way it authenticated and the expiry.

Format: ``mr1.<base64url JSON {"p": principal, "m": method, "exp": ms since the epoch, "i": index}>.<base64url
HMAC>``; ``index`` is the controller state's applied index where the token was issued (a node behind it may not
know the user yet).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

from multiraft.errors import AuthenticationFailedError

__all__ = ["Token", "issue_token", "verify_token", "TOKEN_PREFIX"]

TOKEN_PREFIX = "mr1"
_MAX_TOKEN_CHARS = 2048


@dataclass(frozen=True, slots=True)
class Token:
    principal: str
    method: str
    expires_ms: int
    index: int = 0  # the issuing node's applied controller index


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, f"{TOKEN_PREFIX}.{payload}".encode("ascii"), hashlib.sha256).digest())


def issue_token(key: bytes, token: Token) -> str:
    payload = _b64(
        json.dumps(
            {"p": token.principal, "m": token.method, "exp": token.expires_ms, "i": token.index}, sort_keys=True
        ).encode()
    )
    return f"{TOKEN_PREFIX}.{payload}.{_signature(key, payload)}"


def verify_token(key: bytes, text: str, now_ms: int) -> Token:
    """The token ``text`` stands for; AuthenticationFailedError if it is forged, malformed or expired."""
    parts = text.split(".")
    if len(text) > _MAX_TOKEN_CHARS or len(parts) != 3 or parts[0] != TOKEN_PREFIX or not key:
        raise AuthenticationFailedError("malformed token")
    if not hmac.compare_digest(_signature(key, parts[1]), parts[2]):
        raise AuthenticationFailedError("invalid token (not signed by this cluster)")
    try:
        fields = json.loads(_unb64(parts[1]))
        token = Token(str(fields["p"]), str(fields["m"]), int(fields["exp"]), int(fields.get("i", 0)))
    except (ValueError, KeyError, TypeError) as exc:
        raise AuthenticationFailedError("malformed token") from exc
    if token.expires_ms <= now_ms:
        raise AuthenticationFailedError("expired token: authenticate again", expired="true")
    return token
