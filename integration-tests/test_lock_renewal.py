"""Batches that take longer than the acquisition lock: the source renews the locks of the records it
holds (RENEW) until their batch commits, and shows in its metrics when the broker refuses. A batch
may also outlast the time the consumer pool keeps unused consumers."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from conftest import (
    KafkaCluster,
    drained_rows,
    run_drain_job,
    share_stream,
    source_metrics,
    values,
    wait_until,
)
from expectations import assert_every_record_once

LOCK_MS = 3000
SLOW_BATCH_S = 3 * LOCK_MS / 1000
PARALLELISM = 4


def run_with_one_slow_batch(
    spark: SparkSession,
    kafka: KafkaCluster,
    topic: str,
    group: str,
    expected: list[str],
    while_slow: Callable[[], None] = lambda: None,
    once_settled: Callable[[], None] = lambda: None,
):
    """Runs a query whose first non-empty batch takes three lock durations, calling `once_settled`
    when the group has given each consumer its partitions and `while_slow` as the slow batch starts
    waiting, until the sink has every record and the source reports no backlog, then stops it and
    checks the group has nothing left; returns what the sink saw as (value, deliveryCount) and the
    source metrics."""
    seen: list[tuple[str, int]] = []
    slowed: list[int] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        rows = batch.selectExpr("cast(value as string) v", "deliveryCount").collect()
        if rows and not slowed:
            slowed.append(batch_id)
            while_slow()
            time.sleep(SLOW_BATCH_S)
        seen.extend((r.v, r.deliveryCount) for r in rows)

    options = {"kafka.share.lock.timeout.ms": str(LOCK_MS), "kafka.share.parallelism": str(PARALLELISM)}
    df = share_stream(spark, topic, group, startingOffsets="earliest", **options)
    query = df.writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds").start()
    try:
        partitions = len(kafka.admin.list_topics(topic=topic, timeout=10).topics[topic].partitions)
        wait_until(
            lambda: query.exception() is not None or kafka.assignment_settled(group, PARALLELISM, partitions),
            60,
            "each consumer got its partitions",
        )
        once_settled()
        wait_until(
            lambda: query.exception() is not None or len({v for v, _ in seen}) == len(expected),
            120,
            "every record was read",
        )
        assert query.exception() is None, str(query.exception())
        time.sleep(LOCK_MS / 1000 + 1)  # a record whose lock had lapsed would come back by now
        # Records that came back several times may still be coming: Kafka hands out records delivered
        # more than half the delivery limit a few at a time. The query is done when it reports no backlog.
        wait_until(
            lambda: source_metrics(query).get("backlogRecords") == "0",
            60,
            "the source reported no backlog",
            # Should the backlog stay above 0 though every record was read: what each side says.
            lambda: {"source": source_metrics(query), "kafka": kafka.group_state(group)},
        )
        metrics = source_metrics(query)
    finally:
        query.stop()
    assert kafka.unfinished(group, topic) == 0
    return seen, metrics


def test_records_of_a_batch_longer_than_the_lock_are_renewed_not_redelivered(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # Produced once the group has settled: a consumer that joined first holds every partition for a
    # few seconds, and records it acquires of one that Kafka then moves to another member come back
    # when their lock expires, renewed or not (docs/delivery-guarantees.md, "loses a partition").
    topic = kafka.new_topic(partitions=2)
    expected = values(2000)

    seen, metrics = run_with_one_slow_batch(
        spark, kafka, topic, group, expected, once_settled=lambda: kafka.produce(topic, expected, key=str)
    )

    assert_every_record_once(
        expected, [v for v, _ in seen], context="a record came twice although its batch was running"
    )
    assert {count for _, count in seen} == {1}
    assert int(metrics["lockRenewals"]) > 0
    assert metrics["locksExpired"] == "0"


def test_records_acquired_while_a_long_batch_runs_keep_their_locks_until_the_next_batch(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # One record: one slot reads it, the others poll nothing, and a share consumer whose poll
    # returned nothing goes on fetching in the background. The records produced while the first
    # batch is slow are acquired by those consumers then, and must still be theirs afterwards.
    topic = kafka.new_topic()
    first, later = values(1, prefix="a"), values(500, prefix="b")
    kafka.produce(topic, first)

    seen, metrics = run_with_one_slow_batch(
        spark, kafka, topic, group, first + later, while_slow=lambda: kafka.produce(topic, later)
    )

    assert_every_record_once(first + later, [v for v, _ in seen])
    assert {count for _, count in seen} == {1}, "records lost their locks while they waited in a consumer"
    assert metrics["locksExpired"] == "0"


def test_renewal_that_an_operator_allows_while_the_query_runs_keeps_a_long_batch_locked(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # The group refuses renewal when the query starts; an operator allows it (as `kafka-configs` does)
    # while the query runs, and the query renews from then on, without a restart.
    topic = kafka.new_topic(partitions=2)
    expected = values(2000)
    kafka.refuse_lock_renewal(group)

    def allow_renewal_then_produce() -> None:
        kafka.set_group_config(group, "share.renew.acknowledge.enable", "true")
        time.sleep(6)  # the driver reads the group's configs again every 5 s
        kafka.produce(topic, expected, key=str)

    seen, metrics = run_with_one_slow_batch(
        spark, kafka, topic, group, expected, once_settled=allow_renewal_then_produce
    )

    assert_every_record_once(expected, [v for v, _ in seen])
    assert {count for _, count in seen} == {1}, "records lost their locks: renewal was not taken up"
    assert int(metrics["lockRenewals"]) > 0
    assert metrics["locksExpired"] == "0"


def test_when_the_group_refuses_renewal_records_come_back_and_the_metrics_and_the_log_say_so(
    spark: SparkSession, kafka: KafkaCluster, group: str, driver_log: Callable[[], str]
) -> None:
    expected = values(200)
    topic = kafka.topic_with(expected)
    kafka.refuse_lock_renewal(group)

    seen, metrics = run_with_one_slow_batch(spark, kafka, topic, group, expected)

    # At-least-once still: nothing lost, the slow batch's records delivered again.
    assert_every_record_once(expected, [v for v, _ in seen], allow_duplicates_up_to=math.inf)
    assert max(count for _, count in seen) >= 2
    assert int(metrics["locksExpired"]) > 0
    assert metrics["lockRenewals"] == "0"
    # The driver warns once, naming the group, the metric and the option that helps.
    warnings = [line for line in driver_log().splitlines() if "lost their acquisition lock" in line]
    assert len(warnings) == 1, warnings
    assert f"Share group '{group}'" in warnings[0]
    assert "Metric 'locksExpired'" in warnings[0]
    assert "kafka.share.lock.timeout.ms" in warnings[0]


# In make test-extended: ShareConsumerPoolSuite's "the janitor keeps a running batch's records locked
# past the idle timeout" shows the janitor's rule against the broker in make test, and
# test_records_of_a_batch_longer_than_the_lock_are_renewed_not_redelivered a long batch end to end.
@pytest.mark.extended
def test_a_batch_longer_than_the_consumer_cache_timeout_keeps_its_records_locked(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    # While foreachBatch runs, no task uses the batch's consumers. The pool's janitor closes consumers
    # unused for spark.kafkaShare.consumer.cache.timeout (5 s at the earliest, its interval), but must
    # keep those whose batch has not committed: closing one releases its records, and they come back.
    expected = values(2000)
    topic = kafka.topic_with(expected, partitions=2, key=str)

    cache_timeout = ("--spark-conf", "spark.kafkaShare.consumer.cache.timeout=6s")
    job = ("--lock-timeout-ms", str(LOCK_MS), "--slow-batch-s", "25", *cache_timeout)
    assert run_drain_job(topic, group, tmp_path, *job) == 0

    assert (tmp_path / "out" / "slow-batch").exists(), "no batch with records was slowed"
    rows = drained_rows(tmp_path)
    closed = "a record comes twice if a consumer was closed while its batch ran"
    got = [v for v, _ in rows]
    assert_every_record_once(expected, got, kafka=kafka, group=group, topic=topic, context=closed)
    assert {count for _, count in rows} == {1}
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert int(metrics["lockRenewals"]) > 0
    assert (metrics["locksExpired"], metrics["recordsReleased"]) == ("0", "0")
