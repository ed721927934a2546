"""Security settings as a user writes them, against the local broker's SASL_PLAINTEXT listener
(dev/kafka-local: mechanism PLAIN, user alice). The assembly shades kafka-clients, which renames
Kafka's classes and the system properties its client reads; the source maps Kafka's own names to
the shaded ones (ShadedKafkaNames), and these tests fail if it does not."""

from __future__ import annotations

import os
import re
import uuid
import zipfile
from collections.abc import Callable, Iterator

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from spark_kafka_share import KafkaShareConfigurationError, from_jvm_error

from conftest import BOOTSTRAP, JAR, KafkaCluster, drain_values, values

# dev/kafka-local's SASL listener: KAFKA_SASL_PORT, by default two above the plaintext port.
_HOST, _PORT = BOOTSTRAP.split(",")[0].rsplit(":", 1)
SASL_BOOTSTRAP = f"{_HOST}:{os.environ.get('KAFKA_SASL_PORT') or int(_PORT) + 2}"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SHADED_PACKAGE = "io.github.sparkkafkashare.shaded.kafka"
ALLOWED_LOGIN_MODULES = "allowed.login.modules"


def sasl_stream(spark: SparkSession, topic: str, group: str, password: str) -> DataFrame:
    return (
        spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", SASL_BOOTSTRAP)
        .option("kafka.security.protocol", "SASL_PLAINTEXT")
        .option("kafka.sasl.mechanism", "PLAIN")
        .option(
            "kafka.sasl.jaas.config", f'{PLAIN_LOGIN_MODULE} required username="alice" password="{password}";'
        )
        .option("kafka.share.group.id", group)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def failure_of(df: DataFrame) -> StreamingQueryException:
    query = df.writeStream.format("noop").trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(120)
    return failure.value


@pytest.fixture
def system_properties(spark: SparkSession) -> Iterator[dict[str, str]]:
    """Kafka system properties to set on the driver JVM (the executors' too, in local mode) for one
    test, under Kafka's names; afterwards they are cleared under both names."""
    props: dict[str, str] = {}
    yield props
    system = spark.sparkContext._jvm.java.lang.System
    for name in props:
        system.clearProperty(f"org.apache.kafka.{name}")
        system.clearProperty(f"{SHADED_PACKAGE}.{name}")


def set_kafka_system_property(spark: SparkSession, props: dict[str, str], name: str, value: str) -> None:
    props[name] = value
    spark.sparkContext._jvm.java.lang.System.setProperty(f"org.apache.kafka.{name}", value)


def test_a_query_reads_through_sasl_with_kafkas_own_login_module_name(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # The shaded client has no class org.apache.kafka...PlainLoginModule: unmapped, the login fails.
    topic = kafka.new_topic(partitions=2)
    kafka.produce(topic, values(500))
    assert drain_values(spark, sasl_stream(spark, topic, group, "alice-secret")) == values(500)
    assert kafka.unfinished(group, topic) == 0, "every record acknowledged through the SASL listener"


def test_a_wrong_password_fails_the_query_and_no_message_or_log_line_shows_it(
    spark: SparkSession, kafka: KafkaCluster, group: str, driver_log: Callable[[], str]
) -> None:
    topic = kafka.new_topic()
    password = f"wrong-{uuid.uuid4().hex}"
    message = str(failure_of(sasl_stream(spark, topic, group, password)))
    assert "Authentication failed" in message, message
    assert password not in message
    assert password not in driver_log()


def test_kafkas_allowed_login_modules_property_reaches_the_shaded_client(
    spark: SparkSession, kafka: KafkaCluster, group: str, system_properties: dict[str, str]
) -> None:
    topic = kafka.new_topic()
    kafka.produce(topic, values(100))
    # An operator's allow-list without PLAIN refuses the login, as it would with Kafka's own client.
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    set_kafka_system_property(spark, system_properties, ALLOWED_LOGIN_MODULES, scram)
    failure = failure_of(sasl_stream(spark, topic, group, "alice-secret"))
    message = str(failure)
    assert "[KAFKA_SHARE_CLIENT_NOT_CREATED] Could not create Kafka's Admin client" in message, message
    assert "PlainLoginModule is not allowed" in message, message
    assert isinstance(from_jvm_error(failure), KafkaShareConfigurationError)
    # With PLAIN allowed under its own name, the query reads: the class names in the list are mapped too.
    set_kafka_system_property(
        spark, system_properties, ALLOWED_LOGIN_MODULES, f"{scram},{PLAIN_LOGIN_MODULE}"
    )
    assert drain_values(spark, sasl_stream(spark, topic, group, "alice-secret")) == values(100)


def test_the_source_mirrors_every_system_property_the_shaded_client_reads(spark: SparkSession) -> None:
    # The shader rewrote every string naming Kafka's package; those that name no class or package of
    # the jar are the system properties kafka-clients reads. A kafka-clients upgrade that adds one
    # fails here until ShadedKafkaNames.SystemProperties has it.
    prefix = SHADED_PACKAGE.replace(".", "/") + "/"
    with zipfile.ZipFile(JAR) as jar:
        entries = set(jar.namelist())
        classes = [n for n in entries if n.startswith(prefix) and n.endswith(".class")]
        strings = {
            m.decode()
            for n in classes
            for m in re.findall(rb"io\.github\.sparkkafkashare\.shaded\.kafka\.[A-Za-z0-9_.]+", jar.read(n))
        }
    packages = {n.rsplit("/", k)[0] for n in entries for k in range(1, n.count("/") + 1)}
    read_by_client = {
        s[len(SHADED_PACKAGE) + 1 :]
        for s in strings
        if f"{s.replace('.', '/')}.class" not in entries and s.replace(".", "/") not in packages
    }
    mirrored = spark.sparkContext._jvm.io.github.sparkkafkashare.options.ShadedKafkaNames.SystemProperties()
    assert read_by_client == set(mirrored.mkString(",").split(","))
