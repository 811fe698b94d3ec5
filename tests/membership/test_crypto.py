"""The gossip keyring and the sealed form of packets: what one key seals, any ring holding that key opens;
anything else (another key, another cluster, one flipped bit, plain text) is refused with UndecryptableError."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from membership import KEY_SIZES, SEAL_OVERHEAD, Keyring, KeyringError, MembershipCodecError, UndecryptableError
from membership import generate_key as new_key
from membership._wire import Message, PushPull, cluster_tag, encode_message, encode_packet, encode_push_pull

from .strategies import messages, push_pulls

AD = b"multiraft"
keys = st.sampled_from(KEY_SIZES).flatmap(lambda size: st.binary(min_size=size, max_size=size))
rings = st.lists(keys, min_size=1, max_size=5, unique=True).map(lambda ks: Keyring(tuple(ks)))


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


@given(ring=rings, batch=st.lists(messages(), min_size=1, max_size=8), data=st.data())
def test_a_packet_sealed_with_any_key_of_the_ring_opens_with_the_ring(
    ring: Keyring, batch: list[Message], data: st.DataObject
) -> None:
    packet = encode_packet(cluster_tag("c"), 5, 3, [encode_message(m) for m in batch])
    # The sender's primary may be any key of the receiver's ring (the middle of a rotation).
    sender_key = data.draw(st.sampled_from(ring.keys))
    sealed = Keyring((sender_key,)).seal(packet, AD)
    assert len(sealed) == len(packet) + SEAL_OVERHEAD
    assert packet not in sealed  # encrypted, not only signed
    assert ring.unseal(sealed, AD) == packet


@given(ring=rings, state=push_pulls())
def test_a_push_pull_state_round_trips_sealed(ring: Keyring, state: PushPull) -> None:
    plain = encode_push_pull(state)
    assert ring.unseal(ring.seal(plain, AD), AD) == plain


@given(ring=rings, plain=st.binary(max_size=1400), data=st.data())
def test_any_flipped_bit_is_refused(ring: Keyring, plain: bytes, data: st.DataObject) -> None:
    sealed = bytearray(ring.seal(plain, AD))
    bit = data.draw(st.integers(0, len(sealed) * 8 - 1))
    sealed[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(UndecryptableError):
        ring.unseal(bytes(sealed), AD)


@given(ring=rings, plain=st.binary(max_size=200), cut=st.integers(min_value=1, max_value=SEAL_OVERHEAD + 200))
def test_a_truncated_message_is_refused(ring: Keyring, plain: bytes, cut: int) -> None:
    sealed = ring.seal(plain, AD)
    with pytest.raises(UndecryptableError):
        ring.unseal(sealed[: max(0, len(sealed) - cut)], AD)


@given(ring=rings, other=keys, plain=st.binary(max_size=200))
def test_a_key_outside_the_ring_is_refused(ring: Keyring, other: bytes, plain: bytes) -> None:
    if other in ring.keys:
        return
    with pytest.raises(UndecryptableError, match="no key"):
        ring.unseal(Keyring((other,)).seal(plain, AD), AD)


@given(ring=rings, plain=st.binary(max_size=200))
def test_another_cluster_name_is_refused_even_with_the_same_key(ring: Keyring, plain: bytes) -> None:
    with pytest.raises(UndecryptableError):
        ring.unseal(ring.seal(plain, b"other-cluster"), AD)


@given(ring=rings, batch=st.lists(messages(), min_size=1, max_size=4))
def test_a_plain_packet_is_refused(ring: Keyring, batch: list[Message]) -> None:
    packet = encode_packet(cluster_tag("c"), 5, 3, [encode_message(m) for m in batch])
    with pytest.raises(UndecryptableError, match="not sealed"):
        ring.unseal(packet, AD)


def test_undecryptable_is_a_codec_error() -> None:
    assert issubclass(UndecryptableError, MembershipCodecError)


def test_two_seals_of_the_same_bytes_differ() -> None:
    ring = Keyring.from_base64(new_key())
    assert ring.seal(b"same", AD) != ring.seal(b"same", AD)  # a fresh nonce each time


def test_the_primary_seals_and_every_key_opens() -> None:
    old, new = new_key(), new_key()
    rotated = Keyring.from_base64(new, old)
    assert rotated.primary == base64.b64decode(new)
    # What the new primary seals opens with the new key only: nodes that lack it cannot read it.
    with pytest.raises(UndecryptableError):
        Keyring.from_base64(old).unseal(rotated.seal(b"x", AD), AD)
    assert Keyring.from_base64(new).unseal(rotated.seal(b"x", AD), AD) == b"x"
    assert rotated.unseal(Keyring.from_base64(old).seal(b"y", AD), AD) == b"y"


def test_a_keyring_file_has_one_base64_key_a_line_with_comments_and_blank_lines(tmp_path: Path) -> None:
    keys = [bytes([i]) * size for i, size in enumerate(KEY_SIZES, 1)]
    path = tmp_path / "gossip.keyring"
    path.write_text(f"# primary\n{_b64(keys[0])}\n\n  {_b64(keys[1])}  \n# old\n{_b64(keys[2])}\n")
    ring = Keyring.load(path)
    assert ring.keys == tuple(keys)
    assert ring.primary == keys[0]
    assert len(ring.fingerprints()) == 3 and all(len(f) == 8 for f in ring.fingerprints())


def test_a_keyring_never_shows_its_keys_in_repr_or_str() -> None:
    key = b"\x01secret-key-bytes"[:16]
    ring = Keyring((key,))
    for shown in (repr(ring), str(ring)):
        assert repr(key) not in shown and _b64(key) not in shown and key.hex() not in shown
        assert ring.fingerprints()[0] in shown


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no key"),
        ("# only a comment\n\n", "no key"),
        ("not base64!\n", "line 1: not base64"),
        (f"{_b64(b'k' * 16)}\n{_b64(b'x' * 20)}\n", "line 2: a 20-byte key"),
        (f"{_b64(b'k' * 16)}\n{_b64(b'k' * 16)}\n", "line 2: the same key"),
        (_b64(b"k" * 64), "a 64-byte key"),
    ],
)
def test_a_wrong_keyring_file_names_the_line_and_the_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "gossip.keyring"
    path.write_text(text)
    with pytest.raises(KeyringError, match=problem):
        Keyring.load(path)


def test_a_missing_keyring_file_is_a_keyring_error(tmp_path: Path) -> None:
    with pytest.raises(KeyringError, match="cannot read keyring file"):
        Keyring.load(tmp_path / "absent")


def test_keys_must_be_aes_sizes_and_distinct() -> None:
    with pytest.raises(KeyringError, match="at least one key"):
        Keyring(())
    with pytest.raises(KeyringError, match="key 1 is 15 bytes"):
        Keyring((b"k" * 15,))
    with pytest.raises(KeyringError, match="twice"):
        Keyring((b"k" * 16, b"k" * 16))


@pytest.mark.parametrize("size", KEY_SIZES)
def test_generated_keys_are_random_base64_of_the_asked_size(size: int) -> None:
    first, second = new_key(size), new_key(size)
    assert len(base64.b64decode(first)) == size
    assert first != second
    assert Keyring.from_base64(first, second).keys[1] == base64.b64decode(second)


def test_a_key_size_other_than_aes_is_refused_by_the_generator() -> None:
    with pytest.raises(KeyringError, match="16, 24 or 32"):
        new_key(20)
