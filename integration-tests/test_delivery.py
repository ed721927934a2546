"""At-least-once delivery through a real share group: counts of lost and duplicated records in the
sink, and the acknowledgement state read back through Kafka's Admin API."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from pyspark import TaskContext
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.streaming import StreamingQuery

from conftest import (
    KafkaCluster,
    acknowledged,
    drain_values,
    drained_rows,
    run_drain_job,
    share_stream,
    source_metrics,
    values,
    wait_until,
)
from expectations import assert_every_record_once

SINK_SCHEMA = "value string, partition int, offset long, deliveryCount int"


def parquet_query(df: DataFrame, out: Path, *, available_now: bool = True) -> StreamingQuery:
    writer = (
        df.select(col("value").cast("string").alias("value"), "partition", "offset", "deliveryCount")
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="200 milliseconds")
    )
    return writer.start()


def sink_values(spark: SparkSession, out: Path) -> list[str]:
    """What the file sink committed (its metadata log excludes uncommitted batches)."""
    if not (out / "data" / "_spark_metadata").exists():
        return []
    return [r.value for r in spark.read.schema(SINK_SCHEMA).parquet(str(out / "data")).collect()]


def scan_task_metrics(spark: SparkSession) -> dict[str, int]:
    """The kafka-share scan's task metrics as the Spark UI's SQL tab shows them, summed over every SQL
    execution (micro-batch) so far, by metric class name."""
    jsession = spark._jsparkSession
    executions = jsession.sharedState().statusStore().executionsList()
    totals: dict[str, int] = {}
    for i in range(executions.size()):
        execution = executions.apply(i)
        values = execution.metricValues()  # accumulator id -> aggregated value; set once it ended
        if values is None:
            continue
        by_id = {pair._1(): pair._2() for pair in (values.toSeq().apply(j) for j in range(values.size()))}
        metrics = execution.metrics()
        for j in range(metrics.size()):
            metric = metrics.apply(j)
            kind = metric.metricType()
            if kind.startswith("v2Custom_io.github.sparkkafkashare") and metric.accumulatorId() in by_id:
                name = kind.rsplit(".", 1)[1]
                totals[name] = totals.get(name, 0) + int(by_id[metric.accumulatorId()])
    return totals


def decode_failing_once(marker: Path) -> Any:
    """A UDF that decodes `value`, and fails the first task attempt that runs it, once while `marker`
    does not exist (it creates it)."""

    @udf("string")
    def decode(value):  # no type hints: PySpark would try to read them as a pandas UDF's, and warn
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0:
            try:
                marker.open("x").close()
            except FileExistsError:
                pass
            else:
                raise RuntimeError("injected failure on a task's first attempt")
        return value.decode()

    return decode


@pytest.mark.compat
def test_every_record_once_with_more_consumers_than_partitions(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path, driver_log: Callable[[], str]
) -> None:
    expected = values(10_000)
    topic = kafka.topic_with(expected)

    before = scan_task_metrics(spark)
    df = share_stream(spark, topic, group, **{"kafka.share.parallelism": "4", "startingOffsets": "earliest"})
    query = parquet_query(df, tmp_path)
    assert query.awaitTermination(240), "Trigger.AvailableNow did not finish"
    assert query.exception() is None

    # Acknowledged, not just read: the broker has nothing left to deliver to the group.
    assert kafka.group_state(group)["members"] == [], "stopped query left consumers in the group"
    metrics = source_metrics(query)
    assert_every_record_once(
        expected, sink_values(spark, tmp_path), kafka=kafka, group=group, topic=topic, metrics=metrics
    )
    # Every acknowledgement was applied: none refused for an expired lock, none failed otherwise.
    assert (metrics.get("locksExpired"), metrics.get("acknowledgementsFailed")) == ("0", "0"), metrics
    # Each slot's consumer joined the group once and served every batch of the drain.
    assert metrics.get("consumersJoined") == "4", metrics
    # The backlog (Kafka's share-partition lag, once Kafka reports one for the new group) shrinks to
    # nothing, and the last progress says so.
    reported = [p["sources"][0]["metrics"].get("backlogRecords") for p in query.recentProgress]
    backlogs = [int(b) for b in reported if b is not None]
    assert backlogs == sorted(backlogs, reverse=True), reported
    assert reported[-1] == "0", reported
    # The same counts per batch on the scan node of the SQL tab (task metrics), summed over the batches.
    after = scan_task_metrics(spark)
    per_batch = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert per_batch.get("RecordsAcquiredMetric") == 10_000, per_batch
    assert per_batch.get("RecordsAcceptedMetric") == 10_000, per_batch
    assert per_batch.get("RecordsRedeliveredMetric") == 0, per_batch
    assert per_batch.get("AcknowledgementsFailedMetric") == 0, per_batch
    assert per_batch.get("ConsumersJoinedMetric") == 4, per_batch
    # Nothing went wrong, so the connector warned of nothing (the Kafka client it shades aside).
    loggers = [line.split(" ")[1] for line in driver_log().splitlines()]
    ours = ("io.github.sparkkafkashare.", "org.apache.spark.sql.kafkashare.")
    assert [c for c in loggers if c.startswith(ours) and ".shaded." not in c] == [], driver_log()


TIME_METRICS = {
    "pollMs": "PollTimeMetric",
    "acknowledgeMs": "AcknowledgeTimeMetric",
    "recordsLogMs": "RecordsLogTimeMetric",
}


@pytest.mark.parametrize("strategy", ["none", "two-phase-commit"])
def test_the_sources_share_of_each_batch_shows_in_its_progress_and_task_metrics(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str
) -> None:
    """The time the tasks spent polling, acknowledging and in the records log, and the time the
    driver waited on Kafka's Admin API, grow with the run in every progress; the records log costs
    time only under a strategy that has one; the task metrics of the batches add up to the run's."""
    expected = values(4_000)
    topic = kafka.topic_with(expected, partitions=2)
    before = scan_task_metrics(spark)
    options = {"startingOffsets": "earliest", "kafka.share.exactly.once.strategy": strategy}
    query = parquet_query(share_stream(spark, topic, group, **options), tmp_path)
    assert query.awaitTermination(180), "Trigger.AvailableNow did not finish"
    assert query.exception() is None
    assert_every_record_once(expected, sink_values(spark, tmp_path), kafka=kafka, group=group, topic=topic)

    progress = [p for p in query.recentProgress if "addBatch" in p["durationMs"]]
    names = [*TIME_METRICS, "adminMs"]
    runs = {name: [int(p["sources"][0]["metrics"][name]) for p in progress] for name in names}
    for name, totals in runs.items():
        assert totals == sorted(totals), (name, totals)
    last = {name: totals[-1] for name, totals in runs.items()}
    assert min(last["pollMs"], last["acknowledgeMs"], last["adminMs"]) > 0, last
    assert (last["recordsLogMs"] > 0) == (strategy != "none"), last
    # Each batch's sum is rounded down to the ms on its own, the run's total once.
    after = scan_task_metrics(spark)
    batches = len(progress)
    for name, metric in TIME_METRICS.items():
        summed = after.get(metric, 0) - before.get(metric, 0)
        assert summed <= last[name] <= summed + batches, (name, summed, last[name], batches)


def test_two_queries_in_one_group_split_the_records(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    topic = kafka.new_topic(partitions=2)
    # A cap per trigger turns off the consumers' prefetch (record_limit), so one query's consumers
    # cannot acquire every record ahead of the other's first poll.
    options = {"kafka.share.parallelism": "2", "startingOffsets": "earliest", "maxRecordsPerTrigger": "1000"}
    queries = [
        parquet_query(share_stream(spark, topic, group, **options), tmp_path / f"q{i}", available_now=False)
        for i in range(2)
    ]
    try:
        # Both queries' consumers have joined and been assigned partitions before the records arrive,
        # so both get a share (a member the broker has not assigned yet would get nothing).
        def all_assigned() -> bool:
            members = kafka.group_state(group)["members"]
            return len(members) == 4 and all(m["assignment"] for m in members)

        wait_until(all_assigned, 60, "both queries joined the group and were assigned partitions")
        expected = values(6_000)
        kafka.produce(topic, expected, key=lambda i: str(i))
        outputs: list[list[str]] = [[], []]

        def all_read() -> bool:
            outputs[:] = [sink_values(spark, tmp_path / f"q{i}") for i in range(2)]
            # Acknowledged: their batches committed, so stopping now cuts no batch short.
            return sum(map(len, outputs)) >= len(expected) and sum(
                acknowledged(source_metrics(q)) for q in queries
            ) >= len(expected)

        wait_until(all_read, 120, "the two queries together read and accepted every record")
    finally:
        for q in queries:
            q.stop()
    # Kafka's side, checked once both have stopped: while four members acknowledge one partition at
    # once, Kafka's reported lag can stay stale (conftest).
    assert_every_record_once(expected, outputs[0] + outputs[1], kafka=kafka, group=group, topic=topic)
    assert all(outputs), f"one query got nothing: {[len(o) for o in outputs]}"
    assert not set(outputs[0]) & set(outputs[1])
    # While records remained, the queries' progress showed the group's backlog.
    backlogs = [
        int(p["sources"][0]["metrics"].get("backlogRecords", 0)) for q in queries for p in q.recentProgress
    ]
    assert max(backlogs) > 0, backlogs


@pytest.mark.compat
def test_a_failed_tasks_records_are_returned_by_its_retry_without_another_delivery(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(2_000)
    topic = kafka.topic_with(expected)
    marker = tmp_path / "failed-once"

    df = share_stream(spark, topic, group, **{"kafka.share.parallelism": "2", "startingOffsets": "earliest"})
    query = parquet_query(df.withColumn("value", decode_failing_once(marker)(col("value"))), tmp_path)
    assert query.awaitTermination(240)
    assert query.exception() is None
    assert marker.exists(), "the failure was never injected"

    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert_every_record_once(expected, [r.value for r in rows], kafka=kafka, group=group, topic=topic)
    # The failed attempt kept what it had acquired, and the retry returned it: no record was delivered twice.
    assert max(r.deliveryCount for r in rows) == 1


@pytest.mark.parametrize("strategy", ["none", "checkpoint-dedup", "two-phase-commit"])
def test_what_a_task_that_fails_after_reading_counted_is_reported_once(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str
) -> None:
    """A task fails once, after its records were polled (and logged). Spark drops a failed task's
    counts, but what it counted happened: the source reports it with the slot's next task, so
    `recordsAcquired` matches the records the sink got and `consumersJoined` counts the failed
    attempt's consumer."""
    expected = values(1_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    marker = tmp_path / "failed-once"
    options = {
        "kafka.share.parallelism": "2",
        "startingOffsets": "earliest",
        "kafka.share.exactly.once.strategy": strategy,
    }
    df = share_stream(spark, topic, group, **options)
    query = parquet_query(df.withColumn("value", decode_failing_once(marker)(col("value"))), tmp_path)
    assert query.awaitTermination(240)
    assert query.exception() is None
    assert marker.exists(), "the failure was never injected"
    metrics = source_metrics(query)
    # The failed attempt kept its records for the retry, which returned them: acquired once.
    assert_every_record_once(
        expected, sink_values(spark, tmp_path), kafka=kafka, group=group, topic=topic, metrics=metrics
    )
    assert metrics["consumersJoined"] == "2", metrics


def test_drains_of_a_growing_topic_lose_nothing_and_a_stop_costs_one_delivery_at_most(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """Back-to-back availableNow drains, as a scheduled job runs them, while records keep arriving.
    A drain can end with records its consumers fetched ahead, which the stop releases (Kafka counted
    that fetch as a delivery); the next drain reads them, so none is lost and none is read twice. A
    record comes with a third delivery only if that drain's consumers fetched it ahead again; none
    may come with a fourth (five would archive it). How often a drain ends with records fetched
    ahead depends on timing (since every consumer stops fetching before any releases, seldom), so the
    stop's release of them is checked in ShareConsumerPoolSuite, where the test makes it happen."""
    topic = kafka.new_topic(partitions=4)
    produced: list[str] = []
    producer_failures: list[BaseException] = []
    done = threading.Event()

    def produce() -> None:
        try:
            while not done.is_set():
                batch = values(100, f"r{len(produced):06d}")
                kafka.produce(topic, batch)
                produced.extend(batch)
                time.sleep(0.5)
        except BaseException as e:  # a dead producer would leave the drains a topic that stopped growing
            producer_failures.append(e)

    producer = threading.Thread(target=produce)
    producer.start()
    seen: list[tuple[str, int]] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        rows = batch.selectExpr("cast(value as string) v", "deliveryCount").collect()
        seen.extend((r.v, r.deliveryCount) for r in rows)

    def drain() -> None:
        stream = share_stream(spark, topic, group, startingOffsets="earliest")
        query = stream.writeStream.foreachBatch(sink).trigger(availableNow=True).start()
        assert query.awaitTermination(120)
        assert query.exception() is None

    try:
        for _ in range(6):
            drain()
    finally:
        done.set()
        producer.join()
    drain()  # what the producer added last
    drain()

    assert not producer_failures, producer_failures
    counts = Counter(count for _, count in seen)
    assert max(counts) <= 3, f"deliveryCount per record: {dict(counts)}"
    assert_every_record_once(produced, [v for v, _ in seen], kafka=kafka, group=group, topic=topic)


def test_records_deleted_before_the_group_read_them_are_skipped_and_the_query_goes_on(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """What Spark's `failOnDataLoss` guards against, which a share group does not check: records
    removed from the log (by retention, here by Admin deleteRecords) before the group read them."""
    topic = kafka.topic_with(values(50, "a"))
    first = parquet_query(share_stream(spark, topic, group, startingOffsets="earliest"), tmp_path)
    assert first.awaitTermination(120), "the first drain did not end"
    assert sorted(sink_values(spark, tmp_path)) == sorted(values(50, "a"))

    kafka.produce(topic, values(100, "b"))  # offsets 50 to 149
    deleted = kafka.admin.delete_records([TopicPartition(topic, 0, 110)])  # b0 to b59
    for future in deleted.values():
        future.result(timeout=30)

    second = parquet_query(share_stream(spark, topic, group), tmp_path)
    assert second.awaitTermination(120), "the second drain did not end"
    assert second.exception() is None
    got = [v for v in sink_values(spark, tmp_path) if v.startswith("b")]
    assert_every_record_once(values(100, "b")[60:], got, kafka=kafka, group=group, topic=topic)


def test_a_batch_joined_with_itself_completes_or_fails_clearly_and_loses_nothing(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """In a cartesian product of a batch with itself, a task reads two slots, holding the first until
    it completes, so two tasks can each wait for the other's slot: they do in about two runs of three,
    hence three runs. Such a wait ends after a few seconds with an error that says to persist the
    batch, where the query would hang. Whichever way a run goes, what its failed batch held comes
    again, and nothing is lost."""
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # a cartesian product, not a broadcast
    try:
        for attempt in range(3):
            topic = kafka.new_topic(partitions=4)
            run_group = f"{group}-{attempt}"
            kafka.produce(topic, values(400), key=str)
            committed, error = join_each_batch_with_itself(spark, topic, run_group)
            if error is not None:
                assert "[KAFKA_SHARE_BATCH_JOINED_WITH_ITSELF]" in error, error[:2000]
                assert "Persist the batch DataFrame" in error
            rest = drain_values(spark, share_stream(spark, topic, run_group))
            got = committed + rest
            assert_every_record_once(
                values(400), got, kafka=kafka, group=run_group, topic=topic, context=f"run {attempt}"
            )
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")


def join_each_batch_with_itself(spark: SparkSession, topic: str, group: str) -> tuple[list[str], str | None]:
    """Drains `topic` with a foreachBatch that counts each batch's cartesian product with itself.
    Returns the values of the batches that completed, and the error the query failed with, if any."""
    committed: list[str] = []

    def pairs(batch: DataFrame, _batch_id: int) -> None:
        rows = [r.v for r in batch.selectExpr("cast(value as string) v").collect()]
        assert batch.crossJoin(batch).count() == len(rows) ** 2
        committed.extend(rows)

    options = {"startingOffsets": "earliest", "kafka.share.parallelism": "4"}
    query = (
        share_stream(spark, topic, group, **options)
        .writeStream.foreachBatch(pairs)
        .trigger(availableNow=True)
    )
    started = query.start()
    try:
        assert started.awaitTermination(90), "the query hung"
        return committed, None
    except StreamingQueryException as failure:
        return committed, str(failure)
    finally:
        started.stop()


def test_records_of_a_task_that_fails_four_times_are_read_after_a_restart_that_fails_once_more(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """Spark's four attempts of a task fail, so the query fails; the restart's first attempt fails
    too, and its retry succeeds. Five failures: a failure that gave its records back each time would
    take them to Kafka's delivery-count limit (5 by default), and Kafka would archive them."""
    expected = values(200)
    topic = kafka.topic_with(expected)
    job = ("--master", "local[2,4]", "--fault", "task-failure", "--task-failures", "5")
    assert run_drain_job(topic, group, tmp_path, *job) != 0
    assert (tmp_path / "out" / "task-failure-injected-3").exists(), "the first run did not fail four times"
    assert run_drain_job(topic, group, tmp_path, *job) == 0
    assert (tmp_path / "out" / "task-failure-injected-4").exists()

    rows = drained_rows(tmp_path)
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)
    # Delivered once to the first run, whose failed query released them as it stopped, and once more.
    assert max(count for _, count in rows) <= 2, sorted({count for _, count in rows})
