"""Kerberos (SASL GSSAPI) against the local broker, with a KDC of its own (dev/kdc-local) started for
this module only, and the broker restarted with its GSSAPI listener (dev/kafka-local,
KAFKA_LOCAL_KERBEROS) for as long. The JDK's Kerberos login reads the realm from krb5.conf, which the
driver JVM (the executors' too, in local mode) is pointed at before any Kerberos login in it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from conftest import (
    REPO,
    KafkaCluster,
    drain_values,
    drained_rows,
    local_broker,
    run_drain_job,
    share_stream,
    values,
)
from expectations import assert_every_record_once
from test_security import failure_of, listener

KDC_LOCAL = REPO / "dev" / "kdc-local" / "kdc-local"
KDC_DIR = REPO / "target" / "kdc-local"
# dev/kafka-local's GSSAPI listener, there while the broker runs with KAFKA_LOCAL_KERBEROS.
KERBEROS_BOOTSTRAP = listener("KAFKA_KERBEROS_PORT", 5)
KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


@pytest.fixture(scope="module", autouse=True)
def kerberos_realm(spark: SparkSession) -> Iterator[None]:
    env = {**os.environ, "KDC_LOCAL_DIR": str(KDC_DIR)}
    subprocess.run([str(KDC_LOCAL), "start"], check=True, timeout=300, env=env)
    spark.sparkContext._jvm.java.lang.System.setProperty(
        "java.security.krb5.conf", str(KDC_DIR / "krb5.conf")
    )
    local_broker("restart", kerberos=KDC_DIR)
    yield
    local_broker("restart")
    subprocess.run([str(KDC_LOCAL), "stop"], check=True, timeout=120, env=env)


def kerberos_settings(keytab: str, principal: str) -> dict[str, str]:
    """Options that log in to the GSSAPI listener as `principal` from the keytab file `keytab`, as a
    service with a keytab of its own does."""
    login = f'{KRB5_LOGIN_MODULE} required useKeyTab=true storeKey=true keyTab="{keytab}"'
    login += f' principal="{principal}";'
    return {
        "kafka.bootstrap.servers": KERBEROS_BOOTSTRAP,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "GSSAPI",
        "kafka.sasl.kerberos.service.name": "kafka",
        "kafka.sasl.jaas.config": login,
    }


def kerberos_stream(spark: SparkSession, topic: str, group: str, principal: str) -> DataFrame:
    """A stream of `topic` from the start, logging in as `principal` from the realm's keytab."""
    settings = kerberos_settings(str(KDC_DIR / "kafka.keytab"), principal)
    return share_stream(spark, topic, group, startingOffsets="earliest", **settings)


def test_a_query_reads_through_kerberos_with_a_keytab(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.topic_with(values(300), partitions=2)
    got = drain_values(spark, kerberos_stream(spark, topic, group, "alice@EXAMPLE.COM"))
    assert_every_record_once(values(300), got, kafka=kafka, group=group, topic=topic, context="GSSAPI")


def test_a_principal_the_keytab_lacks_fails_the_query_saying_the_login_failed(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.topic_with(values(10))
    message = str(failure_of(kerberos_stream(spark, topic, group, "bob@EXAMPLE.COM")))
    assert "[KAFKA_SHARE_CLIENT_NOT_CREATED] Could not create Kafka's Admin client" in message, message
    assert "LoginException: Could not login" in message, message
    assert "(a truststore, a keystore, a Kerberos keytab) must be at that path" in message
    assert kafka.total_lag(group) in (None, 10), "the query read nothing"


# Extended: make test logs in with the keytab on the driver; test_secrets_audit.py (extended too)
# logs in with it on executors in their own JVMs as well.
@pytest.mark.extended
def test_executors_in_jvms_of_their_own_log_in_with_the_shipped_keytab(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    # As the user guide deploys it: krb5.conf named by a JVM option on the driver and the executors,
    # the keytab shipped with spark.files and named by its file name (the driver runs where it is).
    expected = values(1_000)
    topic = kafka.topic_with(expected, partitions=2)
    krb5 = f"-Djava.security.krb5.conf={KDC_DIR / 'krb5.conf'}"
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "2")
    job += ("--spark-conf", f"spark.driver.extraJavaOptions={krb5}")
    job += ("--spark-conf", f"spark.executor.extraJavaOptions={krb5}")
    job += ("--spark-conf", f"spark.files={KDC_DIR / 'kafka.keytab'}")
    settings = kerberos_settings("kafka.keytab", "alice@EXAMPLE.COM")
    job += tuple(f"--option={name}={value}" for name, value in settings.items())
    assert run_drain_job(topic, group, tmp_path, *job, cwd=KDC_DIR) == 0
    assert (tmp_path / "out" / "executors.txt").read_text() == "2"
    rows = drained_rows(tmp_path)
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)
