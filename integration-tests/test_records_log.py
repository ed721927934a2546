"""The records log of `checkpoint-dedup` and `two-phase-commit`: what its duplicate check drops, and
the records it must let through. Real broker, real Spark, counts of lost and duplicated records in a
file sink and Kafka's lag read back through the Admin API."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from pyspark.sql import SparkSession

from conftest import KafkaCluster, share_stream, values, wait_until
from expectations import assert_every_record_once
from test_delivery import parquet_query, sink_values

LOGGING_STRATEGIES = pytest.mark.parametrize("strategy", ["checkpoint-dedup", "two-phase-commit"])


def make_topic_again(kafka: KafkaCluster, topic: str, partitions: int) -> None:
    """Deletes `topic` and creates it again under the same name: its offsets start at 0 again."""
    kafka.admin.delete_topics([topic])[topic].result(timeout=30)
    wait_until(lambda: topic not in kafka.admin.list_topics(timeout=10).topics, 60, f"{topic} is deleted")
    deadline = time.monotonic() + 60
    while True:  # the broker refuses the name until the deletion has reached every part of it
        try:
            kafka.admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@LOGGING_STRATEGIES
def test_a_topic_made_again_under_its_name_is_read_whole_from_the_same_checkpoint(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str
) -> None:
    """The new topic's records reuse the old one's offsets. The log still remembers the old records
    (their share-partitions are gone, so nothing prunes them), and a duplicate check keyed on topic
    name, partition and offset alone would ACCEPT and drop the new records as redeliveries."""
    topic = kafka.new_topic(partitions=2)
    first, second = values(2_000, "old"), values(2_000, "new")
    kafka.produce(topic, first)
    options = {"startingOffsets": "earliest", "kafka.share.exactly.once.strategy": strategy}

    for expected in (first, second):
        if expected is second:
            make_topic_again(kafka, topic, partitions=2)
            kafka.produce(topic, second)
        query = parquet_query(share_stream(spark, topic, group, **options), tmp_path)
        assert query.awaitTermination(180), "Trigger.AvailableNow did not finish"
        assert query.exception() is None
        this_topic = [v for v in sink_values(spark, tmp_path) if v.startswith(expected[0][:3])]
        assert_every_record_once(expected, this_topic, kafka=kafka, group=group, topic=topic)
