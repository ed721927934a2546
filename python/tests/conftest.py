"""Fixtures for the tests that need a JVM or a broker; the other tests need neither."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JAR = REPO / "connector/target/scala-2.13/spark-kafka-share-assembly-0.1.0-SNAPSHOT.jar"
BROKER = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")


def pytest_configure(config: pytest.Config) -> None:
    # Registered here rather than in pyproject.toml: `make test` runs these tests from the repository root.
    config.addinivalue_line("markers", "jvm: needs the connector jar; starts a local Spark session")
    config.addinivalue_line(
        "markers", "broker: needs a Kafka broker at KAFKA_BOOTSTRAP_SERVERS or localhost:9092"
    )


def connector_jar() -> Path:
    return Path(os.environ.get("SPARK_KAFKA_SHARE_JAR", DEFAULT_JAR))


# Module scope, and a session of another suite is reused, not stopped: suites that run before or
# after these tests in the same process (integration-tests/) keep a session of their own.
@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local session with the connector jar on its classpath."""
    jar = connector_jar()
    if not jar.is_file():
        pytest.skip(f"no connector jar at {jar}: build it (make jar) or set SPARK_KAFKA_SHARE_JAR")
    existing = SparkSession.getActiveSession()
    if existing is not None:
        yield existing
        return
    session = (
        SparkSession.builder.master("local[1]")
        .appName("spark-kafka-share-python-tests")
        .config("spark.jars", str(jar))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker() -> str:
    """The bootstrap servers of the local broker; skips the test when nothing listens there."""
    host, port = BROKER.split(",")[0].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        pytest.skip(f"no Kafka broker listening on {BROKER}")
    return BROKER
