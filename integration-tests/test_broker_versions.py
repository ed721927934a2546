"""A cluster older than the source supports: Kafka 4.1, whose share groups are a preview, has
share.version=1 but refuses fetches in `share.acquire.mode=record_limit` and has no RENEW. A query
on it must fail as it starts, saying so, not run on reading nothing. So must one on a cluster whose
upgrade from 4.1 is not finalized: it may still have 4.1 brokers, though the one that answers runs
a newer release."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from conftest import KAFKA_LOCAL, free_port, share_stream

# Each case starts a broker of its own: make test-compat runs them, beside the other Kafka releases.
pytestmark = pytest.mark.extended

PREVIEW_RELEASE = "4.1.2"


def broker_beside(tmp_path_factory: pytest.TempPathFactory, **settings: str) -> Iterator[str]:
    """A broker with share.version=1 on free ports beside the tests' broker; `settings` are kafka-local's."""
    data = tmp_path_factory.mktemp("kafka") / "data"
    port = free_port()
    env = {
        **os.environ,
        **settings,
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


@pytest.fixture(scope="module")
def preview_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka 4.1 broker."""
    yield from broker_beside(tmp_path_factory, KAFKA_BROKER_VERSION=PREVIEW_RELEASE)


@pytest.fixture(scope="module")
def unfinalized_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of the tests' release whose cluster is finalized at Kafka 4.1's metadata.version."""
    yield from broker_beside(tmp_path_factory, KAFKA_LOCAL_RELEASE_VERSION="4.1-IV1")


def refusal_at_start(spark: SparkSession, servers: str, group: str, checkpoint: Path) -> str:
    df = share_stream(spark, "any-topic", group, **{"kafka.bootstrap.servers": servers})
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    return str(failure.value)


def test_a_query_on_a_kafka_4_1_broker_fails_as_it_starts_saying_which_release_it_needs(
    spark: SparkSession, preview_broker: str, group: str, tmp_path: Path
) -> None:
    message = refusal_at_start(spark, preview_broker, group, tmp_path)
    assert (
        f"[KAFKA_SHARE_BROKER_UNSUPPORTED] The Kafka cluster at {preview_broker} runs at Kafka 4.1's "
        "metadata.version" in message
    )
    assert "kafka-share needs a cluster at Kafka 4.2 or later: upgrade every broker, then finalize" in message


def test_a_query_on_a_cluster_whose_upgrade_from_4_1_is_not_finalized_fails_as_it_starts(
    spark: SparkSession, unfinalized_broker: str, group: str, tmp_path: Path
) -> None:
    # The broker runs 4.2 or later and supports 4.2's levels: only the finalized level tells.
    message = refusal_at_start(spark, unfinalized_broker, group, tmp_path)
    assert (
        f"[KAFKA_SHARE_BROKER_UNSUPPORTED] The Kafka cluster at {unfinalized_broker} runs at Kafka 4.1's "
        "metadata.version (finalized level 27)" in message
    )
    assert "kafka-features.sh upgrade --release-version 4.2" in message
