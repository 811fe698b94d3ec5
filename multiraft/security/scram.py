"""SCRAM-SHA-256 (RFC 5802, RFC 7677): credentials and both sides of the exchange, with the standard library's
PBKDF2 and HMAC (nothing hand-rolled). Channel binding is not used (gs2 header ``n,,``); TLS, when on,
protects the exchange.

Messages are ``str``; :class:`ScramClient` and :class:`ScramServer` each keep one exchange's state. Standard
library only, so that the client library can use it without loading the node or the controller.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from multiraft.errors import AuthenticationFailedError

__all__ = [
    "Verifier",
    "ScramSecret",
    "MIN_ITERATIONS",
    "DEFAULT_ITERATIONS",
    "MECHANISM",
    "scram_credential",
    "ScramClient",
    "ScramServer",
]

MECHANISM = "SCRAM-SHA-256"
MIN_ITERATIONS = 4096  # RFC 7677 (the controller's MIN_SCRAM_ITERATIONS)
DEFAULT_ITERATIONS = 8192


class Verifier(Protocol):
    """What a server keeps of a password (``multiraft.controller.ScramCredential`` is one)."""

    @property
    def salt(self) -> bytes: ...

    @property
    def iterations(self) -> int: ...

    @property
    def stored_key(self) -> bytes: ...

    @property
    def server_key(self) -> bytes: ...


class ScramSecret(NamedTuple):
    """A verifier computed from a password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys stay out of logs
        return f"ScramSecret(iterations={self.iterations})"


_GS2_HEADER = "n,,"
_NONCE_BYTES = 24
_SALT_BYTES = 16


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def _salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)


def _keys(salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a salted password."""
    client_key = _hmac(salted, b"Client Key")
    return client_key, hashlib.sha256(client_key).digest(), _hmac(salted, b"Server Key")


def scram_credential(password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> ScramSecret:
    """The verifier the cluster stores for ``password`` (computed by the client: the password stays here)."""
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be >= {MIN_ITERATIONS}, got {iterations}")
    if not password:
        raise ValueError("the password is empty")
    salt = salt if salt is not None else secrets.token_bytes(_SALT_BYTES)
    _, stored_key, server_key = _keys(_salted_password(password, salt, iterations))
    return ScramSecret(salt, iterations, stored_key, server_key)


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str, what: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationFailedError(f"malformed SCRAM {what} message")
        found.setdefault(key, value)
    return found


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise AuthenticationFailedError(f"malformed SCRAM {what} message: bad base64") from exc


class ScramClient:
    """The client side: :meth:`first`, then :meth:`final` with the server's first message, then
    :meth:`verify` with the server's final message (proves the server knew the verifier)."""

    def __init__(self, user: str, password: str, nonce: str | None = None) -> None:
        self._user = user
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(_NONCE_BYTES)
        self._first_bare = f"n={_escape(user)},r={self._nonce}"
        self._expected_signature = b""

    def first(self) -> str:
        return _GS2_HEADER + self._first_bare

    def final(self, server_first: str) -> str:
        attrs = _attributes(server_first, "server-first")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise AuthenticationFailedError("the server's SCRAM nonce does not extend the client's")
        if not iterations.isdigit() or int(iterations) < MIN_ITERATIONS:
            raise AuthenticationFailedError(f"the server asks for too few SCRAM iterations ({iterations[:16]})")
        salted = _salted_password(self._password, _b64decode(salt, "server-first"), int(iterations))
        client_key, stored_key, server_key = _keys(salted)
        without_proof = f"c={base64.b64encode(_GS2_HEADER.encode()).decode()},r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        signature = _hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._expected_signature = _hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}"

    def verify(self, server_final: str) -> None:
        attrs = _attributes(server_final, "server-final")
        if "e" in attrs:
            raise AuthenticationFailedError(f"the server refused the SCRAM proof: {attrs['e'][:200]}")
        if not hmac.compare_digest(_b64decode(attrs.get("v", ""), "server-final"), self._expected_signature):
            raise AuthenticationFailedError("the server's SCRAM signature is wrong (it does not know the user)")


@dataclass
class ScramServer:
    """The server side of one exchange. ``lookup`` gives a user's credential, or None for an unknown user."""

    lookup: Callable[[str], Verifier | None]
    nonce: str = ""
    user: str = ""
    _credential: Verifier | None = None
    _first_bare: str = ""
    _server_first: str = ""

    def first(self, client_first: str) -> str:
        """The server-first message; AuthenticationFailedError for an unknown user or a malformed message."""
        if not client_first.startswith(_GS2_HEADER):
            raise AuthenticationFailedError("SCRAM client-first must start with 'n,,' (no channel binding)")
        self._first_bare = client_first[len(_GS2_HEADER) :]
        attrs = _attributes(self._first_bare, "client-first")
        user, client_nonce = _unescape(attrs.get("n", "")), attrs.get("r", "")
        if not user or not client_nonce:
            raise AuthenticationFailedError("SCRAM client-first lacks the user name or the nonce")
        credential = self.lookup(user)
        if credential is None:
            raise AuthenticationFailedError(f"unknown user {user[:64]!r}", user=user[:64])
        self.user, self._credential = user, credential
        self.nonce = client_nonce + secrets.token_urlsafe(_NONCE_BYTES)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self.nonce},s={salt},i={credential.iterations}"
        return self._server_first

    def final(self, client_final: str) -> str:
        """The server-final message once the client's proof checks; AuthenticationFailedError otherwise."""
        credential = self._credential
        if credential is None:
            raise AuthenticationFailedError("SCRAM client-final before client-first")
        without_proof, sep, proof_part = client_final.rpartition(",p=")
        attrs = _attributes(without_proof, "client-final") if sep else {}
        if not sep or attrs.get("r") != self.nonce:
            raise AuthenticationFailedError("SCRAM client-final has a wrong nonce or no proof")
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        proof = _b64decode(proof_part, "client-final")
        signature = _hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailedError(f"bad SCRAM proof for user {self.user!r} (wrong password)")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), credential.stored_key):
            raise AuthenticationFailedError(f"bad SCRAM proof for user {self.user!r} (wrong password)", user=self.user)
        return "v=" + base64.b64encode(_hmac(credential.server_key, auth_message)).decode()
