"""SCRAM-SHA-256 as RFC 7677 specifies it: its published exchange reproduced byte for byte, and wrong passwords,
unknown users and tampered messages refused."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.errors import AuthenticationFailedError
from multiraft.security.scram import ScramClient, ScramServer, scram_credential

# RFC 7677, section 3
USER, PASSWORD = "user", "pencil"
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE_PART = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_FIRST = f"r={CLIENT_NONCE}{SERVER_NONCE_PART},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = f"c=biws,r={CLIENT_NONCE}{SERVER_NONCE_PART},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_the_client_reproduces_the_rfc_7677_exchange() -> None:
    client = ScramClient(USER, PASSWORD, nonce=CLIENT_NONCE)
    assert client.first() == f"n,,n=user,r={CLIENT_NONCE}"
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)


def test_the_server_reproduces_the_rfc_7677_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("multiraft.security.scram.secrets.token_urlsafe", lambda _: SERVER_NONCE_PART)
    credential = scram_credential(PASSWORD, iterations=4096, salt=SALT)
    server = ScramServer(lambda name: credential if name == USER else None)
    assert server.first(f"n,,n=user,r={CLIENT_NONCE}") == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL
    assert server.user == USER


def exchange(user: str, password: str, stored_password: str) -> None:
    credential = scram_credential(stored_password)
    server = ScramServer(lambda name: credential if name == "ali,ce=" else None)
    client = ScramClient(user, password)
    client.verify(server.final(client.final(server.first(client.first()))))


def test_a_user_name_with_commas_and_equals_signs_authenticates() -> None:
    exchange("ali,ce=", "s3cret", "s3cret")


def test_a_wrong_password_is_refused_as_a_bad_proof() -> None:
    with pytest.raises(AuthenticationFailedError, match="bad SCRAM proof"):
        exchange("ali,ce=", "guess", "s3cret")


def test_an_unknown_user_is_refused_by_name() -> None:
    with pytest.raises(AuthenticationFailedError, match="unknown user 'bob'"):
        exchange("bob", "s3cret", "s3cret")


def test_a_server_that_does_not_know_the_verifier_is_caught_by_the_client() -> None:
    client = ScramClient(USER, PASSWORD, nonce=CLIENT_NONCE)
    client.final(SERVER_FIRST)
    with pytest.raises(AuthenticationFailedError, match="signature"):
        client.verify("v=" + base64.b64encode(b"\0" * 32).decode())


@pytest.mark.parametrize(
    "tamper",
    [
        lambda final: final.replace("r=", "r=x", 1),  # a nonce the server did not issue
        lambda final: final.rsplit(",p=", 1)[0],  # no proof
        lambda final: final[:-4] + "AAA=",  # a changed proof
        lambda final: final + "garbage",  # bad base64
    ],
)
def test_a_tampered_client_final_message_is_refused(tamper: object) -> None:
    credential = scram_credential("pw")
    server = ScramServer(lambda name: credential)
    client = ScramClient("u", "pw")
    final = client.final(server.first(client.first()))
    with pytest.raises(AuthenticationFailedError):
        server.final(tamper(final))  # type: ignore[operator]


def test_stored_credentials_hold_no_password_and_differ_per_salt() -> None:
    first, second = scram_credential("same password"), scram_credential("same password")
    assert first.salt != second.salt and first.stored_key != second.stored_key
    assert b"same password" not in b"".join((first.salt, first.stored_key, first.server_key))
    with pytest.raises(ValueError, match="4096"):
        scram_credential("pw", iterations=1000)


scram_like = st.one_of(
    st.text(max_size=60),
    st.lists(st.sampled_from(["n,,", "n=u", "r=abc", "s=AAAA", "i=4096", "c=biws", "p=AA==", ",", "=", "=2C"])).map(
        "".join
    ),
)


@given(scram_like, scram_like)
def test_any_client_message_is_answered_or_refused_with_an_authentication_error(first: str, final: str) -> None:
    credential = scram_credential("pw", iterations=4096)
    server = ScramServer(lambda name: credential)
    try:
        server.first(first)
        server.final(final)
    except AuthenticationFailedError:
        pass
