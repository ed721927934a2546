"""When records are acknowledged, where a new group starts, and what a stopped or idle query leaves
behind, checked against the real broker."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Message
from confluent_kafka.admin import NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col
from pyspark.sql.streaming import StreamingQuery

from conftest import (
    BOOTSTRAP,
    KafkaCluster,
    drain_values,
    local_broker,
    restart_broker_with,
    share_stream,
    source_metrics,
    values,
    wait_until,
)
from expectations import assert_every_record_once


def consumer_threads(spark: SparkSession) -> int:
    """Kafka consumer background threads alive in the driver JVM (local mode: the executor too)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    threads = jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return sum(1 for t in threads if t.getName().startswith("consumer_background_thread"))


def collect_values(df: DataFrame, out: list[str], trigger_ms: int | None = 200) -> StreamingQuery:
    """A query appending each record's value to `out`; `trigger_ms=None` is Spark's default trigger."""

    def sink(batch: DataFrame, _batch_id: int) -> None:
        out.extend(r.value for r in batch.select(col("value").cast("string").alias("value")).collect())

    writer = df.writeStream.foreachBatch(sink)
    if trigger_ms is not None:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()


def test_starting_offsets_earliest_reads_what_a_new_group_finds_and_the_default_does_not(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    before = values(100, "before")
    topic = kafka.topic_with(before)

    from_earliest: list[str] = []
    q = share_stream(spark, topic, group + "-earliest", startingOffsets="earliest")
    query = q.writeStream.foreachBatch(
        lambda b, _: from_earliest.extend(r.v for r in b.selectExpr("cast(value as string) v").collect())
    )
    assert query.trigger(availableNow=True).start().awaitTermination(120)
    assert sorted(from_earliest) == before

    from_default: list[str] = []
    running = collect_values(share_stream(spark, topic, group + "-default"), from_default)
    try:
        # The group starts at the end of the topic as of the query's start (the driver starts a new
        # group's partitions); its consumers join in the first round, idle topic or not.
        def assigned() -> bool:
            members = kafka.group_state(group + "-default")["members"]
            return bool(members) and all(m["assignment"] for m in members)

        wait_until(assigned, 60, "the new group's consumers were assigned the partition")
        time.sleep(3)
        after = values(50, "after")
        kafka.produce(topic, after)
        wait_until(lambda: len(from_default) >= 50, 60, "records produced after the start were read")
        time.sleep(1)
    finally:
        running.stop()
    assert sorted(from_default) == after


HOLDER_LOCK_S = 60  # the most a group may set on a broker with default settings


@contextmanager
def another_member_holding_records(kafka: KafkaCluster, group: str, topic: str) -> Iterator[None]:
    """While the block runs, another member of `group` holds 99 records of `topic` under a lock of
    HOLDER_LOCK_S, and Kafka reports them as the group's lag (it writes a share-partition's state,
    and so its lag, at the first acknowledgement: the member acknowledges one of 100). After the
    block the member acknowledges them, which fails if it lost them, and leaves the group.
    Acquisitions after the set-up get whatever lock the group sets next."""
    held = values(100, "held")
    kafka.produce(topic, held)
    kafka.set_group_config(group, "share.auto.offset.reset", "earliest")
    kafka.set_group_config(group, "share.record.lock.duration.ms", str(HOLDER_LOCK_S * 1000))
    holder = kafka.share_consumer(group)
    try:
        holder.subscribe([topic])
        taken: list[Message] = []

        def take() -> bool:
            taken.extend(m for m in holder.poll(1.0) if m.error() is None)
            return len(taken) == len(held)

        wait_until(take, 60, "the other member acquired the records")
        holder.acknowledge(taken[0])
        holder.commit_sync()
        wait_until(lambda: kafka.total_lag(group) == len(held) - 1, 30, "Kafka counted the held records")
        yield
        for message in taken[1:]:  # still the holder's if no query took its locks from it
            holder.acknowledge(message)
        failed = {str(tp): error for tp, error in holder.commit_sync().items() if error is not None}
        assert not failed, f"the other member lost its records: {failed}"
    finally:
        holder.close()


# "broker" (a broker restarted with its default) is in make test-extended: the source reads the duration
# Kafka describes for the group, which is the broker's default when the group sets none (the test
# checks that of Kafka itself), and ShareGroupConfigsSuite shows the described value becoming the limit.
@pytest.mark.parametrize(
    "lock_set_by", ["option", "operator", pytest.param("broker", marks=pytest.mark.extended)]
)
def test_available_now_waits_one_lock_duration_for_records_another_member_holds(
    spark: SparkSession, kafka: KafkaCluster, group: str, lock_set_by: str, request: pytest.FixtureRequest
) -> None:
    # Kafka's lag counts records another member of the group holds. A drain waits one lock duration
    # (the group's: the drain's option, an operator's group config, or else the broker's default) for
    # them, as records of a member that died come back by then, and ends without them instead of
    # polling until the holder lets go. (A lag Kafka left stale after concurrent acknowledgements looks
    # the same to the source.)
    drain_lock_s = 6
    kafka_default_lock_s = 30
    if lock_set_by == "broker":  # the broker's default for groups that set none
        restart_broker_with(request, {"group.share.record.lock.duration.ms": str(drain_lock_s * 1000)})
    topic = kafka.new_topic()
    with another_member_holding_records(kafka, group, topic):
        read: list[str] = []
        started = time.monotonic()
        # Each sets the group's lock duration for acquisitions from now on; the holder's stand.
        lock_ms = str(drain_lock_s * 1000)
        if lock_set_by == "operator":
            kafka.set_group_config(group, "share.record.lock.duration.ms", lock_ms)
        elif lock_set_by == "broker":
            kafka.unset_group_config(group, "share.record.lock.duration.ms")
            assert kafka.group_config(group, "share.record.lock.duration.ms") == lock_ms
        options = {"kafka.share.lock.timeout.ms": lock_ms} if lock_set_by == "option" else {}
        stream = share_stream(spark, topic, group, **options)
        drain = stream.writeStream.foreachBatch(
            lambda b, _: read.extend(r.v for r in b.selectExpr("cast(value as string) v").collect())
        )
        assert drain.trigger(availableNow=True).start().awaitTermination(HOLDER_LOCK_S)
        took = time.monotonic() - started
        assert took >= drain_lock_s, f"the drain ended after {took:.0f} s, before a lock duration had passed"
        # Kafka's default: what a drain that did not read the group's duration would wait.
        assert took < kafka_default_lock_s, f"the drain waited {took:.0f} s, not the group's lock duration"
        assert read == []
    assert kafka.unfinished(group, topic) == 0


def test_a_stream_reports_no_backlog_for_records_another_member_holds(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # Kafka's lag counts records another member holds, and can be left stale (conftest): a running
    # stream whose round found nothing takes such a partition as empty for a lock duration, so it
    # reports no backlog and plans no round meanwhile. Here the lock (3 s) is shorter than two rounds
    # that wait the full poll timeout (2 s each): a progress report that counted the lag before taking
    # in the round that had just found nothing reported 99 after every round, and rounds never stopped.
    topic = kafka.new_topic()
    with another_member_holding_records(kafka, group, topic):
        read: list[str] = []
        query = collect_values(
            share_stream(spark, topic, group, **{"kafka.share.lock.timeout.ms": "3000"}), read
        )
        try:
            wait_until(
                lambda: source_metrics(query).get("backlogRecords") == "0",
                30,
                "the stream reported no backlog",
                lambda: source_metrics(query),
            )
        finally:
            query.stop()
        assert read == []
    assert kafka.unfinished(group, topic) == 0


@pytest.mark.parametrize("trigger_ms", [None, 200], ids=["default-trigger", "processing-time"])
def test_idle_stream_acknowledges_its_last_batch_and_stops_planning_batches(
    spark: SparkSession, kafka: KafkaCluster, group: str, trigger_ms: int | None
) -> None:
    expected = values(300)
    topic = kafka.topic_with(expected)
    got: list[str] = []
    # A progress report for every trigger that runs no batch, at most one a second (Spark: every 10 s).
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "1s")
    try:
        # One consumer: the acknowledgements are checked with Kafka's lag while the query runs, and
        # two members acknowledging one partition at once can leave that lag stale (conftest).
        df = share_stream(spark, topic, group, startingOffsets="earliest", **{"kafka.share.parallelism": "1"})
        query = collect_values(df, got, trigger_ms)
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    try:
        wait_until(lambda: len(got) >= 300, 60, "every record was read")
        # No new records arrive, yet the last batch is acknowledged well within the 30 s lock.
        wait_until(lambda: kafka.total_lag(group) == 0, 15, "the last batch was acknowledged")
        assert kafka.group_state(group)["members"], "the query should still be running"
        reported = len(query.recentProgress)
        time.sleep(6)
        since = query.recentProgress[reported:]
        # A progress report with an addBatch time ran a batch; the others report triggers without one.
        ran = [p["batchId"] for p in since if "addBatch" in p["durationMs"]]
        assert len(ran) <= 1, f"an idle stream kept planning batches: {ran}"
        idle = [p for p in since if "addBatch" not in p["durationMs"]]
        assert len(idle) >= 3, "progress was not reported while idle"
        waited = statistics.median(p["durationMs"]["latestOffset"] for p in idle)
        if trigger_ms is None:
            # Spark asks again 10 ms after a trigger without a batch; the source answers at its next
            # backlog check (every 500 ms) rather than have Spark's trigger loop spin.
            assert waited >= 300, [p["durationMs"] for p in idle]
        else:
            # Spark would report each trigger that waited as falling behind.
            assert waited < 150, "a processing-time trigger waited"
    finally:
        query.stop()
    assert sorted(got) == expected


def test_records_of_a_batch_that_foreach_batch_left_unread_are_read_at_once(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """A batch that foreachBatch plans but does not read (here: it asks for the number of partitions)
    runs no task, so its consumer does not poll: no sign that the topic is empty. Taken for a round
    that polled and found nothing, it would hold the partition's backlog back for a lock duration
    (60 s here) once the backlog is looked up again, and the records would wait that long."""
    topic = kafka.new_topic()
    got: list[str] = []
    skipped: list[int] = []
    produced = threading.Event()

    def sink(batch: DataFrame, batch_id: int) -> None:
        if produced.is_set() and not skipped:
            skipped.append(batch_id)
            batch.rdd.getNumPartitions()  # planned, yet no task of this batch runs
            time.sleep(2)  # other work: the backlog is looked up again before the next batch
            return
        got.extend(r.v for r in batch.selectExpr("cast(value as string) v").collect())

    options = {
        "startingOffsets": "earliest",
        "kafka.share.parallelism": "1",
        "kafka.share.lock.timeout.ms": "60000",
    }
    query = share_stream(spark, topic, group, **options).writeStream.foreachBatch(sink).start()
    try:
        # The consumer has joined and the stream is idle: the next batch is planned for the records.
        wait_until(lambda: bool(kafka.group_state(group)["members"]), 60, "the consumer joined")
        wait_until(lambda: kafka.total_lag(group) == 0, 30, "Kafka reports the group's lag")
        time.sleep(3)
        produced.set()
        kafka.produce(topic, values(100))
        wait_until(lambda: len(got) >= 100, 30, "the records were read", lambda: (skipped, len(got)))
    finally:
        query.stop()
    assert len(skipped) == 1
    assert sorted(got) == values(100)


def test_partitions_added_to_the_topic_are_read_by_the_running_query(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    """Partitions added to the topic while the query runs are read, each record once, within
    seconds: the driver describes a topic's partitions again every 5 s, and the group coordinator
    assigns a new partition at a member's next heartbeat (every 5 s). The consumers that replace the
    first ones (their poll size changes) may get their share of the new partitions only after their
    first poll: on Kafka 4.4.0, taking that round as proof the partitions are empty would leave their
    records in the client for a lock duration (25 to 39 s) in about half the runs."""
    expected = values(100, "p0")
    topic = kafka.topic_with(expected)
    got: list[str] = []
    stream = share_stream(spark, topic, group, startingOffsets="earliest")
    query = collect_values(stream, got, trigger_ms=None)
    try:
        wait_until(lambda: len(got) >= 100, 60, "the first partition's records were read")
        kafka.admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
        added = time.monotonic()
        for partition in (1, 2):
            records = values(100, f"p{partition}")
            expected += records
            kafka.produce(topic, records, partition=partition)
        wait_until(lambda: len(got) >= 300, 60, "the added partitions' records were read")
        took = time.monotonic() - added
        time.sleep(1)
        metrics = query.lastProgress["sources"][0]["metrics"]
    finally:
        query.stop()
    assert sorted(got) == sorted(expected)
    assert took < 20, f"the added partitions were read {took:.0f} s after they were added"
    # With three partitions each consumer may poll more: every slot replaced its consumer once.
    assert int(metrics["consumersJoined"]) == 2 * int(metrics["consumers"]), metrics


def test_stop_closes_every_consumer_and_leaves_the_group(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.topic_with(values(1000), partitions=2, key=str)
    got: list[str] = []
    query = collect_values(
        share_stream(spark, topic, group, startingOffsets="earliest", **{"kafka.share.parallelism": "3"}), got
    )
    try:
        wait_until(lambda: len(got) >= 1000, 60, "every record was read")
        # Spark reports a batch's progress once it has committed it; stop must acknowledge those.
        wait_until(
            lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 1000, 30, "its batches committed"
        )
        assert consumer_threads(spark) >= 3
        assert len(kafka.group_state(group)["members"]) == 3
    finally:
        query.stop()
    wait_until(lambda: consumer_threads(spark) == 0, 10, "consumer threads ended")
    assert kafka.group_state(group)["members"] == []
    assert kafka.unfinished(group, topic) == 0, "stop must acknowledge what the query committed"


def test_a_query_with_async_progress_tracking_stopped_between_batches_accepts_its_last_batch(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """With Spark's async progress tracking a batch's commit log entry is written only with its offset
    log entry, here the first batch's alone (a 10-minute interval): the stop must go by what the query
    itself committed, or it gives back the last batch's records, which the sink already has."""
    expected = values(3000)
    topic = kafka.topic_with(expected, partitions=2)
    table = f"async_{group.replace('-', '_')}"
    checkpoint = tmp_path / "checkpoint"
    query = (
        share_stream(spark, topic, group, startingOffsets="earliest", maxRecordsPerTrigger="1000")
        .select(col("value").cast("string").alias("value"))
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(checkpoint))
        .option("asyncProgressTrackingEnabled", "true")
        .option("asyncProgressTrackingCheckpointIntervalMs", "600000")
        .trigger(processingTime="4 seconds")
        .start()
    )
    try:
        # Stopped while it waits for its next trigger, so its consumers hold the last batch's records.
        wait_until(
            lambda: sum(p["numInputRows"] > 0 for p in query.recentProgress) >= 2, 60, "two batches read"
        )
    finally:
        query.stop()
    last = max(p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0)
    assert not (checkpoint / "commits" / str(last)).exists(), (
        "the commit log had the last batch: not the case tested"
    )
    first = [r.value for r in spark.table(table).collect()]
    assert 0 < len(first) < len(expected)
    assert kafka.group_state(group)["members"] == []

    rest: list[str] = []
    drain = share_stream(spark, topic, group).writeStream.foreachBatch(
        lambda batch, _: rest.extend(r.v for r in batch.selectExpr("cast(value as string) v").collect())
    )
    assert drain.trigger(availableNow=True).start().awaitTermination(120)
    assert_every_record_once(
        expected,
        first + rest,
        kafka=kafka,
        group=group,
        topic=topic,
        context="a record read twice means the stop released a committed batch",
    )


def test_records_of_a_batch_that_never_committed_are_delivered_again(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """The sink writes, then the batch fails before Spark's commit: nothing was acknowledged."""
    expected = values(500)
    topic = kafka.topic_with(expected)
    written = tmp_path / "written-before-failure.json"

    def write_then_fail(batch: DataFrame, _batch_id: int) -> None:
        rows = [r.v for r in batch.selectExpr("cast(value as string) v").collect()]
        if rows:
            written.write_text(json.dumps(rows))
            raise RuntimeError("failing after the sink wrote, before the batch commits")

    options = {"startingOffsets": "earliest", "kafka.share.parallelism": "2"}
    failing = share_stream(spark, topic, group, **options).writeStream.foreachBatch(write_then_fail)
    with pytest.raises(StreamingQueryException, match="failing after the sink wrote"):
        failing.trigger(availableNow=True).start().awaitTermination(120)
    first_attempt = set(json.loads(written.read_text()))
    assert first_attempt

    again = share_stream(spark, topic, group, **options).select(
        col("value").cast("string").alias("value"), "deliveryCount"
    )
    rows: list[tuple[str, int]] = []
    rerun = again.writeStream.foreachBatch(
        lambda b, _: rows.extend((r.value, r.deliveryCount) for r in b.collect())
    ).trigger(availableNow=True)
    assert rerun.start().awaitTermination(120)

    assert_every_record_once(expected, [v for v, _ in rows], kafka=kafka, group=group, topic=topic)
    redelivered = {v for v, count in rows if count >= 2}
    assert first_attempt <= redelivered, "records the failed batch held were acknowledged before its commit"


# retries=2 also shows that rounds planned between failed lookups do not count as the cluster answering.
@pytest.mark.parametrize("retries", [pytest.param(0, marks=pytest.mark.extended), 2])
def test_a_running_query_fails_with_a_clear_error_once_the_cluster_stays_unreachable(
    spark: SparkSession, kafka: KafkaCluster, group: str, retries: int
) -> None:
    """The broker goes away for good under an idle query: once `fetchOffset.numRetries` backlog
    lookups have failed, the next one fails the query, saying what it could not reach and what to
    raise; rounds planned in between must not count as the cluster answering. (The broker-restart
    case of the fault matrix shows the query waiting an outage out.)"""
    topic = kafka.topic_with(values(10))
    got: list[str] = []
    options = {"kafka.default.api.timeout.ms": "2000", "fetchOffset.numRetries": str(retries)}
    query = collect_values(share_stream(spark, topic, group, startingOffsets="earliest", **options), got)
    try:
        wait_until(lambda: len(got) == 10, 60, "the query read the records")
        local_broker("stop")
        with pytest.raises(StreamingQueryException) as failure:
            query.awaitTermination(120)
    finally:
        local_broker("start")
        query.stop()
    message = str(failure.value)
    assert "[KAFKA_SHARE_BROKER_UNREACHABLE]" in message
    assert f"Could not reach the Kafka cluster at {BOOTSTRAP} within 2000 ms" in message
    assert "'fetchOffset.numRetries'" in message


def test_a_consumer_the_full_group_turns_away_takes_the_place_another_member_leaves(
    request: pytest.FixtureRequest, spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # The broker allows a group two members, and another application's consumer holds one place when
    # the query's two consumers ask to join: one is turned away, and Kafka's client gives up on the
    # group for good. The query reads on through the other, and once that application leaves, the
    # slot's consumer in the next round takes the place: a slot left with the consumer that gave up
    # would read nothing for the rest of the run.
    restart_broker_with(request, {"group.share.max.size": "2"})
    topic = kafka.new_topic(partitions=2)
    other = kafka.share_consumer(group)
    other.subscribe([kafka.new_topic()])  # a member, of another topic: it takes none of the query's records

    def members() -> list[str]:
        return [m["clientId"] for m in kafka.group_state(group)["members"]]

    wait_until(lambda: not other.poll(0.5) and len(members()) == 1, 30, "the other application joined")
    two_consumers = {"startingOffsets": "earliest", "kafka.share.parallelism": "2"}
    # A drain reads everything through the consumer that joined, and ends.
    kafka.produce(topic, values(500, "a"))
    assert drain_values(spark, share_stream(spark, topic, group, **two_consumers)) == values(500, "a")

    kafka.produce(topic, values(500, "b"))
    read: list[str] = []
    query = (
        share_stream(spark, topic, group, **two_consumers)
        .writeStream.foreachBatch(
            lambda batch, _: read.extend(r.v for r in batch.selectExpr("cast(value as string) v").collect())
        )
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_until(
            lambda: query.exception() is not None or len(read) >= 500,
            60,
            "the query read through one consumer",
        )
        assert len(members()) == 2, members()

        # An idle query plans no rounds: the slot asks again in the next round, once records arrive.
        other.close()
        kafka.produce(topic, values(500, "c"))
        query_clients = f"kafka-share-{group}-"
        wait_until(
            lambda: (
                query.exception() is not None
                or (
                    len(read) >= 1000
                    and len(members()) == 2
                    and all(c.startswith(query_clients) for c in members())
                )
            ),
            60,
            "the query read the rest, and the turned-away slot's consumer joined",
            members,
        )
        assert query.exception() is None, str(query.exception())
        # One join each: the consumers turned away meanwhile, one a round, never joined.
        assert source_metrics(query)["consumersJoined"] == "2"
    finally:
        query.stop()
    assert_every_record_once(values(500, "b") + values(500, "c"), read, kafka=kafka, group=group, topic=topic)
