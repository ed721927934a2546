"""A cluster older than the source supports: Kafka 4.1, whose share groups are a preview, has
share.version=1 but refuses fetches in `share.acquire.mode=record_limit` and has no RENEW. A query
on it must fail as it starts, saying so, not run on reading nothing. So must one on a cluster whose
upgrade from 4.1 is not finalized: it may still have 4.1 brokers, though the one that answers runs
a newer release."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from conftest import broker_beside, refusal_at_start

# Each case starts a broker of its own: make test-compat runs them, beside the other Kafka releases.
pytestmark = pytest.mark.extended

PREVIEW_RELEASE = "4.1.2"


@pytest.fixture(scope="module")
def preview_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka 4.1 broker."""
    yield from broker_beside(tmp_path_factory, KAFKA_BROKER_VERSION=PREVIEW_RELEASE)


@pytest.fixture(scope="module")
def unfinalized_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of the tests' release whose cluster is finalized at Kafka 4.1's metadata.version."""
    yield from broker_beside(tmp_path_factory, KAFKA_LOCAL_RELEASE_VERSION="4.1-IV1")


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
