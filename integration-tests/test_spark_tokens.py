"""Executors that log in with the Kafka delegation token Spark ships them, with no keytab and no
login settings of their own (issue 76). A broker of this module's own, on other ports than the
shared one, with delegation tokens enabled, GSSAPI and SCRAM on its SASL listener; a KDC of its own.

Spark's token manager runs only under YARN and Kubernetes, so the driver of jobs/token_drain.py gets
a real token from the broker over GSSAPI and hands it to Spark's scheduler backend, which ships it
to the executors as it ships the tokens its manager obtains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from conftest import JAR, KAFKA_LOCAL, REPO, KafkaCluster, values
from expectations import assert_every_record_once

KDC_LOCAL = REPO / "dev" / "kdc-local" / "kdc-local"
STATE = REPO / "target" / "spark-tokens"
KDC_DIR = STATE / "kdc"
PORT = 19292  # the shared broker's ports stay untouched
PLAINTEXT = f"localhost:{PORT}"
SASL = f"localhost:{PORT + 5}"  # dev/kafka-local's KERBEROS listener, with SCRAM added below
BROKER_ENV = {
    "KAFKA_PORT": str(PORT),
    "KAFKA_CONTROLLER_PORT": str(PORT + 1),
    "KAFKA_DATA_DIR": str(STATE / "kafka" / "data"),
    "KAFKA_LOCAL_KERBEROS": str(KDC_DIR),
    "KAFKA_LOCAL_BROKER_CONFIG": "\n".join(
        [
            "delegation.token.secret.key=kafka-share-test-token-key",
            "listener.name.kerberos.sasl.enabled.mechanisms=GSSAPI,SCRAM-SHA-512",
            "listener.name.kerberos.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        ]
    ),
}
TOKEN_DRAIN = Path(__file__).parent / "jobs" / "token_drain.py"


@pytest.fixture(scope="module")
def token_broker(spark: SparkSession) -> Iterator[KafkaCluster]:
    kdc_env = {**os.environ, "KDC_LOCAL_DIR": str(KDC_DIR)}
    broker_env = {**os.environ, **BROKER_ENV}
    subprocess.run([str(KDC_LOCAL), "start"], check=True, timeout=300, env=kdc_env)
    try:
        subprocess.run([str(KAFKA_LOCAL), "start"], check=True, timeout=300, env=broker_env)
        try:
            yield KafkaCluster(PLAINTEXT, AdminClient({"bootstrap.servers": PLAINTEXT}), spark)
        finally:
            subprocess.run([str(KAFKA_LOCAL), "stop"], check=True, timeout=300, env=broker_env)
    finally:
        subprocess.run([str(KDC_LOCAL), "stop"], check=True, timeout=120, env=kdc_env)


@pytest.mark.extended
def test_executors_log_in_with_the_token_spark_ships(token_broker: KafkaCluster, tmp_path: Path) -> None:
    expected = values(300)
    topic = token_broker.topic_with(expected, partitions=2)
    group = f"g-token-{tmp_path.name[-8:]}"
    command = [
        sys.executable,
        str(TOKEN_DRAIN),
        *("--bootstrap", SASL, "--topic", topic, "--group", group, "--expected", str(len(expected))),
        *("--jar", JAR, "--kdc-dir", str(KDC_DIR), "--out", str(tmp_path)),
    ]
    python_path = os.pathsep.join(p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH")) if p)
    subprocess.run(command, check=True, timeout=420, env={**os.environ, "PYTHONPATH": python_path})

    assert (tmp_path / "token-id").read_text()
    assert json.loads((tmp_path / "executors.json").read_text()) == 3, "the driver and two executors"
    got = json.loads((tmp_path / "values.json").read_text())
    assert_every_record_once(
        expected, got, kafka=token_broker, group=group, topic=topic, context="read with Spark's Kafka token"
    )
