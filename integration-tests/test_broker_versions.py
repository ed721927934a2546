"""A broker older than the source supports: Kafka 4.1, whose share groups are a preview, has
share.version=1 but refuses fetches in `share.acquire.mode=record_limit` and has no RENEW. A query
on it must fail as it starts, saying so, not run on reading nothing."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from conftest import KAFKA_LOCAL, free_port, share_stream

PREVIEW_RELEASE = "4.1.2"


@pytest.fixture(scope="module")
def preview_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka 4.1 broker with share.version=1, on free ports beside the tests' broker."""
    data = tmp_path_factory.mktemp("kafka-4.1") / "data"
    port = free_port()
    env = {
        **os.environ,
        "KAFKA_BROKER_VERSION": PREVIEW_RELEASE,
        "KAFKA_DATA_DIR": str(data),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
        "KAFKA_SASL_PORT": str(free_port()),
        "KAFKA_SSL_PORT": str(free_port()),
        "KAFKA_MTLS_PORT": str(free_port()),
    }
    start = [str(KAFKA_LOCAL), "start"]
    started = subprocess.run(start, capture_output=True, text=True, timeout=600, env=env)
    assert started.returncode == 0, started.stderr
    try:
        yield f"localhost:{port}"
    finally:
        subprocess.run([str(KAFKA_LOCAL), "stop"], capture_output=True, timeout=300, env=env)


def test_a_query_on_a_kafka_4_1_broker_fails_as_it_starts_saying_which_release_it_needs(
    spark: SparkSession, preview_broker: str, group: str, tmp_path: Path
) -> None:
    df = share_stream(spark, "any-topic", group, **{"kafka.bootstrap.servers": preview_broker})
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    message = str(failure.value)
    assert f"[KAFKA_SHARE_BROKER_UNSUPPORTED] The Kafka cluster at {preview_broker} runs Kafka 4.1" in message
    assert "kafka-share needs Kafka 4.2 or later: upgrade the brokers." in message
