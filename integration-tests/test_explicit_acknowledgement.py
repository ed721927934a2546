"""Explicit acknowledgement (kafka.share.acknowledgment.mode=explicit): marks made in foreachBatch
reach the consumer that holds the records when the batch commits, and the broker acts on them."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark import TaskContext
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from spark_kafka_share import (
    AcknowledgeType,
    KafkaShareAcknowledgementError,
    acknowledge,
    marks,
    release_or_dead_letter,
)

from conftest import (
    KafkaCluster,
    acknowledged,
    share_stream,
    source_metrics,
    values,
    wait_until,
)
from expectations import assert_every_record_once

EXPLICIT = {"kafka.share.acknowledgment.mode": "explicit", "startingOffsets": "earliest"}
# Released records come back under every strategy: the ones that log rounds must not drop them as
# duplicates of the batch that released them.
STRATEGIES = pytest.mark.parametrize("strategy", ["none", "checkpoint-dedup", "two-phase-commit"])


def run_until(
    df: DataFrame, sink: Any, done: Any, timeout_s: float, what: str, then_s: float = 0
) -> dict[str, str]:
    """Runs `sink` on every batch until `done(metrics)` holds for the source metrics of the last
    progress, and `then_s` seconds more; returns the metrics then. Whether Kafka has nothing left is
    checked after it returns, with `KafkaCluster.unfinished`: while several members acknowledge
    one partition at once, Kafka's reported lag can stay stale (see there). So that a stop cannot
    cut short the batch that made the sink's state complete (its records would go back to the
    group), `done` waits for the source to have acknowledged them too (`acknowledged`)."""
    query = df.writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds").start()
    try:
        wait_until(lambda: query.exception() is not None or done(source_metrics(query)), timeout_s, what)
        time.sleep(then_s)
        assert query.exception() is None, str(query.exception())
        return source_metrics(query)
    finally:
        query.stop()


@STRATEGIES
@pytest.mark.compat
def test_released_records_come_back_with_a_higher_delivery_count_and_rejected_ones_never(
    spark: SparkSession, kafka: KafkaCluster, group: str, strategy: str
) -> None:
    expected = values(300)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    to_release = set(expected[1::3])
    to_reject = set(expected[2::3])
    seen: list[tuple[str, int]] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        # Three actions that must agree, persisted as the user guide advises: acknowledge() finds the
        # batch's records behind the cache.
        batch.persist()
        rows = batch.selectExpr("cast(value as string) v", "deliveryCount").collect()
        seen.extend((r.v, r.deliveryCount) for r in rows)
        first = batch.filter("deliveryCount = 1").withColumn("v", F.col("value").cast("string"))
        acknowledge(batch, marks(first.filter(F.col("v").isin(*to_release)), AcknowledgeType.RELEASE))
        acknowledge(batch, marks(first.filter(F.col("v").isin(*to_reject)), AcknowledgeType.REJECT))
        batch.unpersist()

    def done(metrics: dict[str, str]) -> bool:
        return len(seen) >= len(expected) + len(to_release) and acknowledged(metrics) >= len(expected)

    # Runs 3 s on: a rejected record that came back would arrive within a few rounds.
    stream = share_stream(spark, topic, group, **EXPLICIT, **{"kafka.share.exactly.once.strategy": strategy})
    metrics = run_until(stream, sink, done, 120, "released records returned", then_s=3)

    deliveries = collections.defaultdict(list)
    for value, count in seen:
        deliveries[value].append(count)
    assert set(deliveries) == set(expected)
    wrong = {
        v: counts
        for v, counts in deliveries.items()
        if sorted(counts) != ([1, 2] if v in to_release else [1])
    }
    assert not wrong, f"{len(wrong)} records delivered other than marked, e.g. {list(wrong.items())[:5]}"
    assert kafka.unfinished(group, topic) == 0  # the rejected records too are done for Kafka
    assert int(metrics["recordsRejected"]) == len(to_reject)
    assert int(metrics["recordsReleased"]) >= len(to_release)


def test_marks_reach_a_slot_whose_next_batch_ran_no_task(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """foreachBatch leaves every other batch unread, so no task runs in it and the slot still holds
    the records of the batch before when a later batch settles them. The marks that batch made
    must apply then: every first delivery is RELEASEd and must come back. Settled by the marks of
    the unread batch (none), they would be ACCEPTed instead."""
    expected = values(200)
    topic = kafka.topic_with(expected)
    seen: list[tuple[str, int]] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        if batch_id % 2 == 1:
            return  # left unread: no task of this batch runs
        seen.extend(
            (r.v, r.deliveryCount)
            for r in batch.selectExpr("cast(value as string) v", "deliveryCount").collect()
        )
        acknowledge(batch, marks(batch.filter("deliveryCount = 1"), AcknowledgeType.RELEASE))

    def done(metrics: dict[str, str]) -> bool:
        came_back = {v for v, count in seen if count >= 2}
        return came_back >= set(expected) and acknowledged(metrics) >= len(expected)

    stream = share_stream(spark, topic, group, **EXPLICIT, maxRecordsPerTrigger="50")
    run_until(stream, sink, done, 120, "every released record came back and was accepted")
    assert {v for v, count in seen if count == 1} == set(expected)
    assert kafka.unfinished(group, topic) == 0


@pytest.mark.parametrize("strategy", ["none", "checkpoint-dedup"])
def test_an_available_now_drain_that_releases_records_ends_once_they_are_accepted(
    spark: SparkSession, kafka: KafkaCluster, group: str, strategy: str
) -> None:
    """Every first delivery is RELEASEd, so each record is acquired twice. A drain that counted both
    acquisitions towards the backlog it started with would end with the released records unread."""
    expected = values(400)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    seen: list[tuple[str, int]] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        seen.extend(
            (r.v, r.deliveryCount)
            for r in batch.selectExpr("cast(value as string) v", "deliveryCount").collect()
        )
        acknowledge(batch, marks(batch.filter("deliveryCount = 1"), AcknowledgeType.RELEASE))

    stream = share_stream(spark, topic, group, **EXPLICIT, **{"kafka.share.exactly.once.strategy": strategy})
    query = stream.writeStream.foreachBatch(sink).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(180), "Trigger.AvailableNow did not finish"
        assert query.exception() is None, str(query.exception())
    finally:
        query.stop()
    # Each record is released at its first delivery, and read again once.
    read_again = [v for v, count in seen if count >= 2]
    assert_every_record_once(expected, read_again, kafka=kafka, group=group, topic=topic)


@STRATEGIES
def test_the_marks_of_a_batch_that_fails_are_dropped_and_its_records_come_back(
    spark: SparkSession, kafka: KafkaCluster, group: str, strategy: str, tmp_path: Path
) -> None:
    """A batch marks every record REJECT, then fails before Spark commits it. A REJECT applied anyway
    would lose those records for good. The query restarts from its checkpoint, and the batch, run
    again, marks nothing: every record must reach that run's sink, once."""
    expected = values(300)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    options = {**EXPLICIT, "kafka.share.exactly.once.strategy": strategy, "maxRecordsPerTrigger": "100"}
    checkpoint = str(tmp_path / "checkpoint")
    marked: list[str] = []

    def reject_all_then_fail(batch: DataFrame, _batch_id: int) -> None:
        batch.persist()
        rows = [r.v for r in batch.selectExpr("cast(value as string) v").collect()]
        if rows:
            acknowledge(batch, marks(batch, AcknowledgeType.REJECT))
            marked.extend(rows)
            raise RuntimeError("failing after marking every record REJECT")

    failing = share_stream(spark, topic, group, **options).writeStream.foreachBatch(reject_all_then_fail)
    with pytest.raises(StreamingQueryException, match="failing after marking every record REJECT"):
        failing.option("checkpointLocation", checkpoint).trigger(availableNow=True).start().awaitTermination(
            120
        )
    assert marked

    read: list[str] = []
    rerun = share_stream(spark, topic, group, **options).writeStream.foreachBatch(
        lambda b, _: read.extend(r.v for r in b.selectExpr("cast(value as string) v").collect())
    )
    assert (
        rerun.option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination(120)
    )

    rejected = f"the failed batch marked {len(marked)} records REJECT, and its marks must not apply"
    assert_every_record_once(expected, read, kafka=kafka, group=group, topic=topic, context=rejected)


def test_acknowledge_rejects_marks_it_cannot_apply(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.topic_with(values(20))
    errors: dict[str, BaseException] = {}

    def attempt(name: str, call: Any) -> None:
        try:
            call()
        except Exception as e:
            errors[name] = e

    def sink(batch: DataFrame, _batch_id: int) -> None:
        if batch.isEmpty():
            return
        outside = spark.createDataFrame(
            [(topic, 0, 10_000, "reject")], "topic string, partition int, offset long, acknowledgement string"
        )
        attempt("outside", lambda: acknowledge(batch, outside))
        attempt(
            "bad-type",
            lambda: acknowledge(
                batch, batch.select("topic", "partition", "offset", F.lit("drop").alias("acknowledgement"))
            ),
        )
        attempt("no-column", lambda: acknowledge(batch, batch.select("topic", "partition", "offset")))
        attempt("not-a-batch", lambda: acknowledge(outside, outside))
        attempt("no-deliveries", lambda: release_or_dead_letter(batch, batch, max_deliveries=0))
        attempt(
            "dead-letter-columns",
            lambda: release_or_dead_letter(
                batch, batch.select("topic", "partition", "offset", "deliveryCount"), 3, "dead-letters"
            ),
        )

    run_until(
        share_stream(spark, topic, group, **EXPLICIT),
        sink,
        lambda _: len(errors) == 6,
        90,
        "every bad call raised",
    )
    assert {name: type(e) for name, e in errors.items()} == dict.fromkeys(
        errors, KafkaShareAcknowledgementError
    )
    conditions = {name: getattr(e, "condition", None) for name, e in errors.items()}
    assert conditions == {
        "outside": "KAFKA_SHARE_ACKNOWLEDGE_RECORD_NOT_IN_BATCH",
        "bad-type": "KAFKA_SHARE_ACKNOWLEDGE_INVALID_MARKS",
        "no-column": "KAFKA_SHARE_ACKNOWLEDGE_INVALID_MARKS",
        "not-a-batch": "KAFKA_SHARE_ACKNOWLEDGE_NOT_A_SHARE_BATCH",
        "no-deliveries": "KAFKA_SHARE_DEAD_LETTER_INVALID_INPUT",
        "dead-letter-columns": "KAFKA_SHARE_DEAD_LETTER_INVALID_INPUT",
    }
    assert "maxDeliveries must be at least 1, not 0" in str(errors["no-deliveries"])
    assert "missing column(s) key, value" in str(errors["dead-letter-columns"])
    assert "a maximum of deliveries of at least 1" in str(errors["dead-letter-columns"])
    assert f"{topic}-0@10000" in str(errors["outside"])
    assert "acknowledgement 'drop'" in str(errors["bad-type"])
    assert "missing column(s) acknowledgement" in str(errors["no-column"])


def test_acknowledge_needs_explicit_mode(spark: SparkSession, kafka: KafkaCluster, group: str) -> None:
    topic = kafka.topic_with(values(5))
    errors: list[BaseException] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        if not batch.isEmpty():
            try:
                acknowledge(batch, marks(batch, AcknowledgeType.REJECT))
            except Exception as e:
                errors.append(e)

    df = share_stream(spark, topic, group, startingOffsets="earliest")
    run_until(df, sink, lambda _: bool(errors), 60, "acknowledge raised")
    assert isinstance(errors[0], KafkaShareAcknowledgementError)
    assert "needs option 'kafka.share.acknowledgment.mode' = 'explicit'" in str(errors[0])


def test_a_batch_evaluated_twice_has_the_same_records(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    expected = values(500)
    topic = kafka.topic_with(expected)
    first: list[str] = []
    mismatches: list[int] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        runs = [sorted(r.v for r in batch.selectExpr("cast(value as string) v").collect()) for _ in range(2)]
        if any(run != runs[0] for run in runs):
            mismatches.append(batch_id)
        first.extend(runs[0])

    run_until(
        share_stream(spark, topic, group, startingOffsets="earliest"),
        sink,
        lambda m: len(first) >= len(expected) and acknowledged(m) >= len(expected),
        90,
        "the topic was drained",
    )
    assert mismatches == [], "a batch's DataFrame gave different records when evaluated again"
    assert_every_record_once(expected, first, kafka=kafka, group=group, topic=topic)


@pytest.mark.parametrize("strategy", ["none", "checkpoint-dedup"])
def test_a_batch_evaluated_again_by_tasks_that_fail_once_has_the_same_records(
    spark: SparkSession, kafka: KafkaCluster, group: str, strategy: str
) -> None:
    """foreachBatch reads its batch, then a second action's tasks fail once each and Spark retries
    them on the same executor. The retries must return what the first action read: had the failures
    released those records, the retries would poll others, which the batch's commit then ACCEPTs
    though the first action never saw them (lost to it), while the released ones come back."""
    expected = values(600)
    topic = kafka.topic_with(expected, partitions=2)
    first: list[str] = []
    mismatches: list[int] = []

    def fail_first_attempt(rows: Iterator[Row]) -> Iterator[Row]:
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("the second evaluation's task fails once")
        return rows

    def sink(batch: DataFrame, batch_id: int) -> None:
        values_of = batch.selectExpr("cast(value as string) v")
        once = sorted(r.v for r in values_of.collect())
        again = sorted(values_of.rdd.mapPartitions(fail_first_attempt).map(lambda r: r.v).collect())
        if again != once:
            mismatches.append(batch_id)
        first.extend(once)

    options = {
        "startingOffsets": "earliest",
        "kafka.share.parallelism": "2",
        "maxRecordsPerTrigger": "100",
        "kafka.share.exactly.once.strategy": strategy,
    }
    run_until(
        share_stream(spark, topic, group, **options),
        sink,
        lambda m: len(first) >= len(expected) and acknowledged(m) >= len(expected),
        120,
        "the topic was drained",
    )
    assert mismatches == [], "a retried task of a batch read again gave other records"
    assert_every_record_once(expected, first, kafka=kafka, group=group, topic=topic)


class DeadLetteringDrain:
    """Drains, with Trigger.AvailableNow from a checkpoint of its own, the explicit-mode stream of
    `topic` that `make_df` builds: each batch parks the poison values (every 25th of `expected`) at
    their first delivery with `release_or_dead_letter` into `dead_letters`, and keeps its other values
    in `processed`. Run again after a failure, it goes on from the checkpoint."""

    def __init__(
        self,
        make_df: Callable[[], DataFrame],
        checkpoint: Path,
        topic: str,
        expected: list[str],
        dead_letters: str,
    ) -> None:
        self.make_df = make_df
        self.checkpoint = checkpoint
        self.topic = topic
        self.dead_letters = dead_letters
        self.expected = expected
        self.poison = expected[::25]
        self.processed: list[str] = []

    def run(self) -> bool:
        """Whether the query ended in time; raises its failure."""

        def sink(batch: DataFrame, _batch_id: int) -> None:
            rows = [r.v for r in batch.selectExpr("cast(value as string) v").collect()]
            failed = batch.filter(F.col("value").cast("string").isin(*self.poison))
            release_or_dead_letter(batch, failed, max_deliveries=1, dead_letter_topic=self.dead_letters)
            self.processed.extend(v for v in rows if v not in self.poison)

        writer = (
            self.make_df().writeStream.foreachBatch(sink).option("checkpointLocation", str(self.checkpoint))
        )
        return bool(writer.trigger(availableNow=True).start().awaitTermination(120))

    def failure(self) -> str:
        """The message of the failure the next run ends with."""
        with pytest.raises(StreamingQueryException) as failure:
            self.run()
        return str(failure.value)

    def assert_each_processed_or_dead_lettered_once(self, kafka: KafkaCluster, group: str) -> None:
        """Every value was processed or copied to the dead-letter topic, once, and the group has
        nothing left of the topic."""
        others = [v for v in self.expected if v not in self.poison]
        assert_every_record_once(others, self.processed, kafka=kafka, group=group, topic=self.topic)
        copies = kafka.consume_all(self.dead_letters, expected_count=len(self.poison))
        assert_every_record_once(self.poison, [c.value for c in copies], context="in the dead-letter topic")


@STRATEGIES
def test_a_poison_record_is_retried_then_dead_lettered_while_every_other_record_is_processed(
    spark: SparkSession, kafka: KafkaCluster, group: str, strategy: str
) -> None:
    topic = kafka.new_topic(partitions=2)
    dead_letters = kafka.new_topic()
    expected = values(400)
    poison = expected[137]
    kafka.produce(topic, expected, key=str)
    processed: list[str] = []
    poison_attempts: list[int] = []
    parked: list[int] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        rows = batch.selectExpr("cast(value as string) v", "deliveryCount").collect()
        # "Processing": every record succeeds except the poison one, every time.
        processed.extend(r.v for r in rows if r.v != poison)
        poison_attempts.extend(r.deliveryCount for r in rows if r.v == poison)
        failed = batch.filter(F.col("value").cast("string") == poison)
        parked.append(release_or_dead_letter(batch, failed, max_deliveries=3, dead_letter_topic=dead_letters))

    run_until(
        share_stream(spark, topic, group, **EXPLICIT, **{"kafka.share.exactly.once.strategy": strategy}),
        sink,
        lambda m: sum(parked) == 1 and acknowledged(m) >= len(expected),
        120,
        "the poison record was parked and the topic drained",
    )
    assert poison_attempts == [1, 2, 3]
    # The poison record was rejected, the rest processed once each and accepted.
    others = [v for v in expected if v != poison]
    assert_every_record_once(others, processed, kafka=kafka, group=group, topic=topic)
    copies = kafka.consume_all(dead_letters, expected_count=1)
    assert [(c.value, c.headers["kafka-share.delivery-count"]) for c in copies] == [(poison, "3")]
    assert copies[0].headers["kafka-share.origin"].startswith(f"{topic}-")


def test_a_dead_letter_topic_that_does_not_exist_fails_the_batch_and_loses_nothing(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    # The broker creates no topic on first write (auto.create.topics.enable=false, as on most clusters).
    expected = values(100)
    topic = kafka.topic_with(expected, partitions=2)
    drain = DeadLetteringDrain(
        lambda: share_stream(spark, topic, group, **EXPLICIT, **{"kafka.max.block.ms": "3000"}),
        tmp_path / "checkpoint",
        topic,
        expected,
        f"{topic}-dead-letters",
    )

    message = drain.failure()
    assert "[KAFKA_SHARE_DEAD_LETTERS_NOT_SENT]" in message, message
    # Kafka's reason: its producer waited kafka.max.block.ms for the topic, and the broker said it has none.
    missing = "UnknownTopicOrPartitionException: This server does not host this topic-partition"
    assert f"records to the dead-letter topic '{drain.dead_letters}': {missing}" in message, message

    # Nothing was marked, so the poison records are still the group's: once the topic exists, the
    # query run again parks them.
    kafka.new_topic_named(drain.dead_letters)
    assert drain.run()
    drain.assert_each_processed_or_dead_lettered_once(kafka, group)
