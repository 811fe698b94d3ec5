"""Gossip encryption: a keyring of AES keys and the sealed form of every packet and push-pull message.

As hashicorp/memberlist does it: the first key of the ring (the primary) encrypts, every key is tried to
decrypt, so keys rotate without a restart in three steps (install a new key everywhere, make it primary
everywhere, remove the old one). Each datagram and each push-pull message travels sealed::

    sealed  = version (u8, 1) | nonce (12 random bytes) | AES-GCM ciphertext of the plain bytes | tag (16 bytes)

The associated data is the cluster name, so a sealed message of another cluster sharing the key does not
open here either. AES-GCM authenticates as well as encrypts: a flipped bit, a wrong key or a plain-text
packet all fail to open, and such input never reaches the protocol core.

A keyring file holds one base64 key (16, 24 or 32 bytes: AES-128, -192, -256) a line, primary first; blank
lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from membership.errors import KeyringError, UndecryptableError

__all__ = ["Keyring", "SEAL_OVERHEAD", "KEY_SIZES", "generate_key"]

KEY_SIZES = (16, 24, 32)
_VERSION = 1
_NONCE_BYTES = 12
_TAG_BYTES = 16
SEAL_OVERHEAD = 1 + _NONCE_BYTES + _TAG_BYTES
"""Bytes a sealed message has beyond its plain text."""
_MAX_KEYS = 64


def generate_key(size: int = 32) -> str:
    """A new random key of ``size`` bytes, base64 encoded: one line of a keyring file."""
    if size not in KEY_SIZES:
        raise KeyringError(f"a key is 16, 24 or 32 bytes, not {size}")
    return base64.b64encode(secrets.token_bytes(size)).decode()


@dataclass(frozen=True)
class Keyring:
    """The keys of the gossip, primary first. Immutable: a rotation builds a new ring and hands it over."""

    keys: tuple[bytes, ...] = field(repr=False)
    _ciphers: tuple[AESGCM, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeyringError("a keyring needs at least one key")
        if len(self.keys) > _MAX_KEYS:
            raise KeyringError(f"a keyring holds at most {_MAX_KEYS} keys, got {len(self.keys)}")
        for number, key in enumerate(self.keys, 1):
            if not isinstance(key, bytes) or len(key) not in KEY_SIZES:
                size = len(key) if isinstance(key, bytes) else type(key).__name__
                raise KeyringError(f"key {number} is {size} bytes; AES keys are 16, 24 or 32 bytes")
        if len(set(self.keys)) != len(self.keys):
            raise KeyringError("the same key is listed twice")
        object.__setattr__(self, "_ciphers", tuple(AESGCM(key) for key in self.keys))

    @classmethod
    def parse(cls, text: str, source: str = "keyring") -> Keyring:
        """A keyring from the text of a keyring file; :class:`KeyringError` names the bad line."""
        keys: list[bytes] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                key = base64.b64decode(line, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise KeyringError(f"{source} line {number}: not base64") from exc
            if len(key) not in KEY_SIZES:
                raise KeyringError(f"{source} line {number}: a {len(key)}-byte key; AES keys are 16, 24 or 32 bytes")
            if key in keys:
                raise KeyringError(f"{source} line {number}: the same key as an earlier line")
            keys.append(key)
        if not keys:
            raise KeyringError(f"{source}: no key (one base64 key a line, the primary first)")
        return cls(tuple(keys))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Keyring:
        """Read and parse a keyring file; an unreadable file is a :class:`KeyringError` too."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyringError(f"cannot read keyring file {os.fspath(path)}: {exc}") from exc
        return cls.parse(text, source=os.fspath(path))

    @classmethod
    def from_base64(cls, *keys: str) -> Keyring:
        """A keyring from base64 keys, primary first."""
        return cls.parse("\n".join(keys))

    def __repr__(self) -> str:
        # Keys are secrets: a repr lands in logs and tracebacks, so it shows fingerprints only.
        return f"Keyring(fingerprints={self.fingerprints()})"

    @property
    def primary(self) -> bytes:
        return self.keys[0]

    def fingerprints(self) -> list[str]:
        """Short, non-secret names of the keys (first 8 hex digits of their SHA-256), primary first, for logs."""
        return [hashlib.sha256(key).hexdigest()[:8] for key in self.keys]

    def seal(self, plain: bytes, associated: bytes) -> bytes:
        """Encrypt and authenticate ``plain`` with the primary key and a fresh random nonce."""
        nonce = os.urandom(_NONCE_BYTES)
        return bytes((_VERSION,)) + nonce + self._ciphers[0].encrypt(nonce, plain, associated)

    def unseal(self, sealed: bytes, associated: bytes) -> bytes:
        """The plain text of ``sealed``, trying every key; raises :class:`UndecryptableError` if none opens it."""
        if sealed[:1] and sealed[0] != _VERSION:
            raise UndecryptableError(f"not sealed (version byte {sealed[0]:#x}; plain text or another format)")
        if len(sealed) < SEAL_OVERHEAD:
            raise UndecryptableError(f"{len(sealed)} bytes is shorter than any sealed message")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        for cipher in self._ciphers:
            try:
                return cipher.decrypt(nonce, body, associated)
            except InvalidTag:
                continue
        raise UndecryptableError(f"no key of the {len(self._ciphers)} in the keyring opens it (or it was altered)")
