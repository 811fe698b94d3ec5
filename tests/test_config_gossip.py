"""The gossip encryption keys of a node's configuration: off the loopback gossip needs a keyring."""

from __future__ import annotations

import pytest

from multiraft.config.node import load_config
from multiraft.errors import ConfigError

REQUIRED = {"node_id": 1, "data_dir": "/var/lib/multiraft"}
SECURED = {"tls_cert_file": "c", "tls_key_file": "k", "tls_ca_file": "ca", "authentication": "scram-sha-256"}


def test_gossip_off_the_loopback_needs_a_keyring_even_with_tls_and_authentication() -> None:
    exposed = {**REQUIRED, **SECURED, "gossip_address": "10.1.2.3:7946"}
    with pytest.raises(ConfigError, match="gossip listens off the loopback") as caught:
        load_config(environ={}, overrides=exposed)
    assert caught.value.field == "gossip_keyring_file"
    assert load_config(environ={}, overrides={**exposed, "gossip_keyring_file": "/etc/k"}).gossip_keyring_file
    assert load_config(environ={}, overrides={**exposed, "insecure": True}).insecure


@pytest.mark.parametrize("key", ["gossip_verify_incoming", "gossip_verify_outgoing"])
def test_lenient_gossip_checks_are_a_migration_state_refused_off_the_loopback(key: str) -> None:
    exposed = {**REQUIRED, **SECURED, "gossip_address": "10.1.2.3:7946", "gossip_keyring_file": "/etc/k"}
    with pytest.raises(ConfigError, match="gossip listens off the loopback"):
        load_config(environ={}, overrides={**exposed, key: False})
    assert not getattr(load_config(environ={}, overrides={**exposed, key: False, "insecure": True}), key)


@pytest.mark.parametrize("key", ["gossip_verify_incoming", "gossip_verify_outgoing"])
def test_gossip_checks_mean_nothing_without_a_keyring(key: str) -> None:
    with pytest.raises(ConfigError, match="only means something with gossip_keyring_file") as caught:
        load_config(environ={}, overrides={**REQUIRED, key: False})
    assert caught.value.field == key
    config = load_config(environ={}, overrides={**REQUIRED, key: False, "gossip_keyring_file": "k"})
    assert getattr(config, key) is False
