"""``multiraft gossip keygen|check``: keys for the encrypted SWIM gossip (``gossip_keyring_file``)."""

from __future__ import annotations

from pathlib import Path

import typer

from membership import KEY_SIZES, Keyring, generate_key
from multiraft.tools.cli._common import console

gossip_app = typer.Typer(help="Keys of the encrypted gossip between nodes (see docs/security.md).")


@gossip_app.command("keygen")
def keygen(
    size: int = typer.Option(32, "--size", help="Key size in bytes: 16, 24 or 32 (AES-128, -192, -256)."),
) -> None:
    """Print a new random key: one line of a keyring file (add it to every node's file to rotate)."""
    if size not in KEY_SIZES:
        raise typer.BadParameter(f"must be 16, 24 or 32, got {size}", param_hint="--size")
    typer.echo(generate_key(size))


@gossip_app.command("check")
def check(path: Path = typer.Argument(..., help="A keyring file (gossip_keyring_file).")) -> None:
    """Check a keyring file as a node reads it; print the keys' fingerprints, the primary first."""
    keyring = Keyring.load(path)
    for number, (key, fingerprint) in enumerate(zip(keyring.keys, keyring.fingerprints(), strict=True), 1):
        role = "primary (encrypts)" if number == 1 else "decrypts only"
        console.print(f"{number}. {fingerprint}  AES-{len(key) * 8}  {role}", highlight=False)
