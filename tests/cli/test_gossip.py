"""``multiraft gossip keygen|check``: new keys for the gossip keyring, and a keyring file checked as a node reads it."""

from __future__ import annotations

import base64
from pathlib import Path

from membership import Keyring
from tests.cli._helpers import ok, one_error_line, run_cli


def test_keygen_prints_a_new_random_base64_key_of_the_asked_size() -> None:
    first, second = ok(run_cli("gossip", "keygen")).strip(), ok(run_cli("gossip", "keygen")).strip()
    assert len(base64.b64decode(first, validate=True)) == 32
    assert first != second
    assert len(base64.b64decode(ok(run_cli("gossip", "keygen", "--size", "16")).strip())) == 16


def test_keygen_refuses_a_size_aes_has_not() -> None:
    result = run_cli("gossip", "keygen", "--size", "20")
    assert result.returncode == 2
    assert "16, 24 or 32" in result.stderr.decode()


def test_check_lists_the_fingerprints_primary_first(tmp_path: Path) -> None:
    path = tmp_path / "gossip.keyring"
    keys = [ok(run_cli("gossip", "keygen", "--size", size)).strip() for size in ("24", "32")]
    path.write_text("# rotation step 2\n" + "\n".join(keys) + "\n")
    lines = ok(run_cli("gossip", "check", str(path))).splitlines()
    fingerprints = Keyring.from_base64(*keys).fingerprints()
    assert lines == [
        f"1. {fingerprints[0]}  AES-192  primary (encrypts)",
        f"2. {fingerprints[1]}  AES-256  decrypts only",
    ]
    assert not any(key in "\n".join(lines) for key in keys)


def test_check_names_the_wrong_line_of_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "gossip.keyring"
    path.write_text(ok(run_cli("gossip", "keygen")) + "not*base64\n")
    assert one_error_line(run_cli("gossip", "check", str(path))) == f"error: {path} line 2: not base64"
