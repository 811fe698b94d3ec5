"""The connector over TLS: security options named as librdkafka (and Spark's Kafka source) name them, checked on
the driver, carried to the executors, against a real TLS cluster and a local Spark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from multiraft import Admin, ConfigError, TlsSettings
from multiraft.tools.launcher import ClusterInfo, cluster_down, cluster_up
from spark_connector._security import Security, parse_security
from tests.integration._helpers import FAST

CA = "ca.pem"


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    path = tmp_path / CA
    path.write_text("not read here")
    return str(path)


def test_without_security_options_the_clients_speak_plaintext() -> None:
    assert parse_security({}) == Security() and Security().client_kwargs() == {}


def test_ssl_gives_the_clients_tls_settings_and_sasl_a_user(ca_file: str) -> None:
    ssl = parse_security({"security.protocol": "ssl", "ssl.ca.location": ca_file})
    assert ssl.client_kwargs() == {"tls": TlsSettings(ca_file=ca_file)}
    sasl = parse_security(
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.ca.location": ca_file,
            "sasl.username": "spark",
            "sasl.password": "s3cret",
        }
    )
    assert sasl.client_kwargs() == {"tls": TlsSettings(ca_file=ca_file), "user": "spark", "password": "s3cret"}
    assert "s3cret" not in repr(sasl)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"ssl.ca.location": "CA"}, "ssl.ca.location"),  # without SSL it would be ignored: refused instead
        ({"security.protocol": "SSL", "ssl.ca.location": "/nowhere/ca.pem"}, "ssl.ca.location"),
        ({"security.protocol": "SSL", "ssl.certificate.location": "CA"}, "ssl.key.location"),
        ({"security.protocol": "SASL_SSL", "sasl.password": "x"}, "sasl.username"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u"}, "sasl.password"),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.username": "u",
                "sasl.password": "p",
                "sasl.mechanism": "PLAIN",
            },
            "sasl.mechanism",
        ),
        ({"sasl.username": "u"}, "sasl.username"),
        ({"security.protocol": "SSL", "kafka.security.protocol": "SSL"}, "security.protocol"),
    ],
)
def test_a_wrong_or_incomplete_security_option_is_named(ca_file: str, options: dict[str, str], named: str) -> None:
    given = {k: (ca_file if v == "CA" else v) for k, v in options.items()}
    with pytest.raises(ConfigError) as raised:
        parse_security(given)
    assert raised.value.field == named


# ------------------------------------------------------------------------------------ against a TLS cluster


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    info = cluster_up(tmp_path_factory.mktemp("spark-secure") / "cluster", 3, FAST, secure=True)
    try:
        yield info
    finally:
        cluster_down(info.directory)


@pytest.mark.spark
@pytest.mark.integration
def test_a_batch_query_writes_and_reads_a_tls_cluster_and_plaintext_fails_on_the_driver(
    spark: Any, secure_cluster: ClusterInfo
) -> None:
    ca = secure_cluster.tls["ca_file"]
    with Admin(secure_cluster.bootstrap, tls=TlsSettings(ca_file=ca)) as admin:
        admin.create_topic("secure-events", partitions=2, replication_factor=3)
    rows = [(None, None, f"k{i}", b"v%d" % i, None) for i in range(200)]
    schema = "topic string, partition int, key string, value binary, headers array<struct<key: string, value: binary>>"
    spark.createDataFrame(rows, schema).write.format("multiraft").mode("append").option(
        "bootstrap", secure_cluster.bootstrap
    ).option("topic", "secure-events").option("security.protocol", "SSL").option("ssl.ca.location", ca).save()

    read = (
        spark.read.format("multiraft")
        .option("bootstrap", secure_cluster.bootstrap)
        .option("subscribe", "secure-events")
        .option("kafka.security.protocol", "SSL")  # as Spark's Kafka source spells it
        .option("kafka.ssl.ca.location", ca)
        .load()
    )
    assert sorted(bytes(r.value) for r in read.collect()) == sorted(b"v%d" % i for i in range(200))

    plaintext = (
        spark.read.format("multiraft")
        .option("bootstrap", secure_cluster.bootstrap)
        .option("subscribe", "secure-events")
        .option("connectTimeoutMs", "3000")
        .load()
    )
    with pytest.raises(Exception, match="may require TLS"):
        plaintext.collect()
