"""Options do what the user guide says, checked on the real broker."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from conftest import (
    BOOTSTRAP,
    KafkaCluster,
    batch_committed,
    restart_broker_with,
    share_stream,
    source_metrics,
    values,
    wait_until,
)
from expectations import assert_every_record_once


def drain(df: DataFrame) -> list[list[tuple[str, ...]]]:
    """Runs the query with Trigger.AvailableNow; returns each non-empty batch's (topic, value) rows."""
    batches: list[list[tuple[str, ...]]] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        rows = [(r.topic, r.v) for r in batch.selectExpr("topic", "cast(value as string) v").collect()]
        if rows:
            batches.append(rows)

    query = df.writeStream.foreachBatch(sink).trigger(availableNow=True).start()
    assert query.awaitTermination(180)
    assert query.exception() is None
    return batches


def counting_slots(read: list[str], per_slot: dict[int, Counter[int]]) -> Callable[[DataFrame, int], None]:
    """A foreachBatch sink that adds each value to `read`, and each non-empty batch's records per slot
    (input partition) to `per_slot`, under the batch's id."""

    def sink(batch: DataFrame, batch_id: int) -> None:
        rows = batch.selectExpr("spark_partition_id() slot", "cast(value as string) v").collect()
        read.extend(r.v for r in rows)
        if rows:
            per_slot[batch_id] = Counter(r.slot for r in rows)

    return sink


def test_subscribe_pattern_reads_every_matching_topic_and_no_other(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    matching = [kafka.new_topic_named(f"{prefix}-orders"), kafka.new_topic_named(f"{prefix}-refunds")]
    other = kafka.new_topic_named(f"{prefix}x-other")
    for topic in [*matching, other]:
        kafka.produce(topic, values(50, topic))

    df = (
        spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("kafka.share.group.id", group)
        .option("subscribePattern", f"{prefix}-.*")
        .option("startingOffsets", "earliest")
        .load()
    )
    rows = [row for batch in drain(df) for row in batch]
    assert sorted(v for _, v in rows) == sorted(values(50, matching[0]) + values(50, matching[1]))
    assert {t for t, _ in rows} == set(matching)


def test_max_records_per_trigger_caps_every_batch(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.topic_with(values(1000))
    options = {"startingOffsets": "earliest", "maxRecordsPerTrigger": "100", "kafka.share.parallelism": "2"}
    batches = drain(share_stream(spark, topic, group, **options))
    assert max(len(b) for b in batches) <= 100
    assert len(batches) >= 10
    assert sorted(v for b in batches for _, v in b) == values(1000)


@pytest.mark.parametrize("lock_limit_from", ["kafka", "broker"])
def test_more_consumers_than_partitions_share_each_batch(
    spark: SparkSession, kafka: KafkaCluster, group: str, lock_limit_from: str, request: pytest.FixtureRequest
) -> None:
    # One partition, four consumers, the group's default of 2000 records in flight per partition: each
    # consumer polls at most 500 a batch, so a batch's records spread over its tasks. In Kafka's default
    # acquire mode the first consumer to poll would take whole record batches, all 2000 and more.
    # A broker whose default for groups is 1000 (group.share.partition.max.record.locks) halves each
    # share to 250: the group sets no limit of its own, and Kafka describes its config with the
    # broker's default. (Were Kafka's 2000 taken regardless, each would poll 500, and Kafka would let
    # all four hold them: in record_limit mode it counts the limit in whole producer batches.)
    lock_limit = 2000
    if lock_limit_from == "broker":
        lock_limit = 1000
        restart_broker_with(request, {"group.share.partition.max.record.locks": str(lock_limit)})
    # Enough records that the drain outlasts the group's assignment of the last consumer to join: on a
    # fast machine three consumers can read all of 20,000 records before Kafka assigns the fourth (its
    # assignment interval and a heartbeat, 2 to 5 s).
    records = 40_000
    topic = kafka.topic_with(values(records))
    read: list[str] = []
    per_slot: dict[int, Counter[int]] = {}
    sink = counting_slots(read, per_slot)

    df = share_stream(spark, topic, group, startingOffsets="earliest", **{"kafka.share.parallelism": "4"})
    query = df.writeStream.foreachBatch(sink).trigger(availableNow=True).start()
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert_every_record_once(values(records), read, kafka=kafka, group=group, topic=topic)
    assert kafka.group_config(group, "share.partition.max.record.locks") == str(lock_limit)
    assert max(n for batch in per_slot.values() for n in batch.values()) <= lock_limit // 4, per_slot
    assert max(len(batch) for batch in per_slot.values()) == 4, per_slot


# partitions-added is extended: the consumers follow the basis of their poll size as lock-limit-raised
# shows, and test_lifecycle reads partitions added to a running query's topic.
@pytest.mark.parametrize(
    "change", [pytest.param("partitions-added", marks=pytest.mark.extended), "lock-limit-raised"]
)
def test_poll_sizes_follow_the_partitions_and_the_lock_limit_while_the_query_runs(
    spark: SparkSession, kafka: KafkaCluster, group: str, change: str
) -> None:
    """Four consumers of one partition each poll at most 500 records, strictly (test above): their
    even share of the group's 2000 locks. Once the topic has four partitions, each consumer can have
    one of its own; once the group's limit is 4000 (set with Kafka's Admin API, as `kafka-configs`
    does), each one's share is 1000. Either way the query replaces its consumers with ones that poll
    more, and a slot's part of a batch passes 500, without a restart of the query."""
    before = values(4_000, "a")
    topic = kafka.topic_with(before)
    read: list[str] = []
    per_slot: dict[int, Counter[int]] = {}
    sink = counting_slots(read, per_slot)

    # Locks of 5 s: see below.
    options = {"kafka.share.parallelism": "4", "kafka.share.lock.timeout.ms": "5000"}
    df = share_stream(spark, topic, group, startingOffsets="earliest", **options)
    query = df.writeStream.foreachBatch(sink).start()
    try:
        wait_until(lambda: len(read) >= len(before), 60, "the first records read")
        last_before = max(per_slot)
        partitions = 4 if change == "partitions-added" else 1
        if change == "partitions-added":
            kafka.add_partitions(topic, partitions)
        else:
            kafka.set_group_config(group, "share.partition.max.record.locks", "4000")
        time.sleep(6)  # the driver reads the partitions and the lock limit again every 5 s
        after = values(40_000, "b")
        for partition in range(partitions):
            kafka.produce(topic, after[partition::partitions], partition=partition)
        wait_until(lambda: set(read) >= set(before + after), 120, "every record read")
        # The replaced consumers join the group at once, and one that loses a partition as the others
        # join cannot acknowledge what it acquired of it (Kafka refuses; docs/delivery-guarantees.md).
        # Those records come back once their lock expires: wait that long, for them to be read again.
        time.sleep(6)
        # The sink has a batch's records before Spark commits it; a stop in between rightly gives them back.
        wait_until(lambda: batch_committed(query, max(per_slot)), 30, "the last batch committed")
    finally:
        query.stop()
    assert query.exception() is None
    refused = int(source_metrics(query).get("acknowledgementsFailed", 0))
    # Counted in deliveries: each extra one is of a record whose acknowledgement Kafka refused.
    assert len(read) - len(set(read)) <= refused, "a record came twice that Kafka had not refused"
    unchanged = [batch for b, batch in per_slot.items() if b <= last_before]
    assert max(n for batch in unchanged for n in batch.values()) <= 500, unchanged
    changed = [batch for b, batch in per_slot.items() if b > last_before]
    assert max(n for batch in changed for n in batch.values()) > 500, changed
    assert kafka.group_state(group)["members"] == [], "a replaced consumer stayed in the group"
    assert_every_record_once(
        before + after, read, kafka=kafka, group=group, topic=topic, allow_duplicates_up_to=refused
    )


def test_one_consumer_of_several_partitions_polls_all_that_a_raised_lock_limit_lets_it_hold(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # One consumer, 4 partitions, the group's lock limit at 10,000: a batch may hold 40,000 records, and
    # the consumer polls that many. With a fixed poll size of 10,000, a batch would hold 10,000 and a
    # record batch or so beyond, and Spark would pay its cost per batch four times as often.
    topic = kafka.new_topic(partitions=4)
    expected = values(80_000)
    for partition in range(4):
        kafka.produce(topic, expected[partition::4], partition=partition)
    options = {
        "startingOffsets": "earliest",
        "kafka.share.parallelism": "1",
        "kafka.share.partition.max.record.locks": "10000",
    }
    batches = drain(share_stream(spark, topic, group, **options))
    assert sorted(v for b in batches for _, v in b) == expected
    assert max(len(b) for b in batches) > 25_000, [len(b) for b in batches]


def test_include_headers_returns_record_headers(spark: SparkSession, kafka: KafkaCluster, group: str) -> None:
    topic = kafka.new_topic()
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(topic, value=b"with", headers=[("trace", b"abc"), ("trace", b"def"), ("kind", b"order")])
    producer.produce(topic, value=b"without")
    assert producer.flush(30) == 0

    rows: list[tuple[str, list[tuple[str, bytes]]]] = []
    df = share_stream(spark, topic, group, startingOffsets="earliest", includeHeaders="true")
    query = df.writeStream.foreachBatch(
        lambda b, _: rows.extend(
            (bytes(r.value).decode(), [(h.key, bytes(h.value)) for h in r.headers or []]) for r in b.collect()
        )
    )
    assert query.trigger(availableNow=True).start().awaitTermination(120)
    assert sorted(rows) == [
        ("with", [("trace", b"abc"), ("trace", b"def"), ("kind", b"order")]),
        ("without", []),
    ]


def test_lock_timeout_sets_the_group_lock_duration(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.topic_with(values(10))
    df = share_stream(
        spark, topic, group, startingOffsets="earliest", **{"kafka.share.lock.timeout.ms": "20000"}
    )
    assert len([v for b in drain(df) for _, v in b]) == 10

    assert kafka.group_config(group, "share.record.lock.duration.ms") == "20000"
    assert kafka.group_config(group, "share.auto.offset.reset") == "earliest"


def test_partition_max_record_locks_sets_the_group_lock_limit_so_a_batch_holds_more_records(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """Records stay locked until their batch commits, so Kafka's lock limit per partition (2000 by
    default) caps a batch; the option raises it for the group. With `record_limit` the broker stops
    about at the limit (the default acquire mode may finish a producer's record batch beyond it): at
    2000, this drain's batches hold 2000 to 2038 records at most; at 6000, 6000 then 3000."""
    topic = kafka.topic_with(values(9000))
    options = {
        "startingOffsets": "earliest",
        "kafka.share.parallelism": "1",
        "kafka.share.acquire.mode": "record_limit",
        "kafka.share.partition.max.record.locks": "6000",
    }
    batches = drain(share_stream(spark, topic, group, **options))
    assert sorted(v for b in batches for _, v in b) == values(9000)
    sizes = [len(b) for b in batches]
    assert max(sizes) > 4000, sizes

    assert kafka.group_config(group, "share.partition.max.record.locks") == "6000"


def drain_by_task(
    spark: SparkSession, topic: str, group: str, options: dict[str, str]
) -> list[list[list[str]]]:
    """Drains `topic` with Trigger.AvailableNow. Per batch with records, the values each of its tasks
    read, leaving out tasks that read none (a task polls once, for its own consumer)."""
    batches: list[list[list[str]]] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        values_read = batch.selectExpr("cast(value as string) v").rdd.map(lambda row: row.v)
        per_task = values_read.mapPartitions(lambda task_values: [list(task_values)])
        polled = [task for task in per_task.collect() if task]
        if polled:
            batches.append(polled)

    df = share_stream(spark, topic, group, **options)
    query = df.writeStream.foreachBatch(sink).trigger(availableNow=True).start()
    assert query.awaitTermination(180)
    assert query.exception() is None
    return batches


def test_consumers_sharing_a_partition_each_poll_their_share_of_the_lock_limit_the_option_sets(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """Four consumers on one partition each poll at most a quarter of the group's lock limit: 1000
    with the option at 4000, where Kafka's default 2000 would give them 500."""
    topic = kafka.topic_with(values(8000))
    options = {
        "startingOffsets": "earliest",
        "kafka.share.parallelism": "4",
        "kafka.share.partition.max.record.locks": "4000",
    }
    polls = [task for batch in drain_by_task(spark, topic, group, options) for task in batch]
    assert sorted(v for task in polls for v in task) == values(8000)
    assert 500 < max(len(task) for task in polls) <= 1000, [len(task) for task in polls]


def test_assignment_interval_zero_gives_every_consumer_of_a_new_query_records_in_its_first_round(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """Four consumers on one partition of a new group: with the option at 0 (the group config
    share.assignment.interval.ms), Kafka assigns the partition to each consumer as it joins, so every
    task of the first batch has records. With Kafka's default (1000 ms) only the first consumer to
    join had it within the 1 s poll; the others got it about 2 s after joining."""
    topic = kafka.topic_with(values(4000))
    options = {
        "startingOffsets": "earliest",
        "kafka.share.parallelism": "4",
        "pollTimeoutMs": "1000",
        "kafka.share.assignment.interval.ms": "0",
    }
    batches = drain_by_task(spark, topic, group, options)
    assert sorted(v for batch in batches for task in batch for v in task) == values(4000)
    assert kafka.group_config(group, "share.assignment.interval.ms") == "0"
    assert len(batches[0]) == 4, [len(batch) for batch in batches]


# The broker bounds a group's lock limit: group.share.min.partition.max.record.locks (100) and
# group.share.max.partition.max.record.locks (10000 on the local broker). load() cannot know them.
@pytest.mark.parametrize("record_locks", ["20000", "10"])
def test_a_group_config_the_broker_refuses_fails_the_query_at_start_naming_the_option(
    spark: SparkSession, kafka: KafkaCluster, group: str, record_locks: str
) -> None:
    df = share_stream(
        spark, kafka.new_topic(), group, **{"kafka.share.partition.max.record.locks": record_locks}
    )
    query = df.writeStream.format("noop").start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    message = str(failure.value)
    assert (
        "[KAFKA_SHARE_GROUP_CONFIG_FAILED] Could not set the configuration "
        f"share.partition.max.record.locks={record_locks} of share group '{group}' "
        "(needed for option 'kafka.share.partition.max.record.locks')"
    ) in message


def test_a_subscribed_topic_that_does_not_exist_yet_has_nothing_to_read_until_it_is_created(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """As with Spark's `kafka` source, subscribing to a topic that does not exist is not an error: a
    drain finds nothing, and reads the topic once it exists. (Describing the missing topic must not
    fail the query as an unreachable cluster.)"""
    topic = f"not-yet-{uuid.uuid4().hex[:8]}"
    options = {"startingOffsets": "earliest"}
    assert drain(share_stream(spark, topic, group, **options)) == []

    kafka.new_topic_named(topic, partitions=2)
    kafka.produce(topic, values(100))
    rows = [row for batch in drain(share_stream(spark, topic, group, **options)) for row in batch]
    assert sorted(v for _, v in rows) == values(100)
