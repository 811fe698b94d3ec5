"""Bearer tokens: any holder of the cluster's key verifies them; a forged, altered or expired one is refused."""

from __future__ import annotations

import pytest

from multiraft.errors import AuthenticationFailedError
from multiraft.security.tokens import Token, issue_token, verify_token

KEY = b"k" * 32


def test_a_token_verifies_to_the_principal_it_was_issued_for_until_it_expires() -> None:
    text = issue_token(KEY, Token("User:alice", "scram-sha-256", 10_000))
    assert verify_token(KEY, text, 9_999) == Token("User:alice", "scram-sha-256", 10_000)
    with pytest.raises(AuthenticationFailedError, match="expired token"):
        verify_token(KEY, text, 10_000)


def test_a_token_signed_with_another_key_is_refused() -> None:
    text = issue_token(b"x" * 32, Token("User:alice", "scram-sha-256", 10_000))
    with pytest.raises(AuthenticationFailedError, match="not signed by this cluster"):
        verify_token(KEY, text, 0)


def test_a_token_whose_principal_was_changed_is_refused() -> None:
    prefix, _, signature = issue_token(KEY, Token("User:alice", "scram-sha-256", 10_000)).split(".")
    other = issue_token(KEY, Token("User:admin", "scram-sha-256", 10_000)).split(".")[1]
    with pytest.raises(AuthenticationFailedError):
        verify_token(KEY, f"{prefix}.{other}.{signature}", 0)


@pytest.mark.parametrize("text", ["", "mr1", "mr1.a.b.c", "xx1.a.b", "mr1." + "a" * 3000 + ".b"])
def test_malformed_tokens_are_refused(text: str) -> None:
    with pytest.raises(AuthenticationFailedError):
        verify_token(KEY, text, 0)


def test_nothing_verifies_while_the_cluster_has_no_key() -> None:
    with pytest.raises(AuthenticationFailedError):
        verify_token(b"", issue_token(b"", Token("User:a", "scram-sha-256", 10)), 0)
