"""Spark's side of the bench: the jars the session adds, streaming queries on kafka-share, on
Spark's own `kafka` source and on its `rate-micro-batch` source, each run to its end (or for a set
time) with the figures its progress gives, and the checkpoint file manager the queries use.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamReader

from . import REPO
from .jvm import jvm_cpu, peak_heap_mb, reset_peak_heap
from .kafka_tools import Kafka, new_group
from .timings import BATCH_PARTS, batch_parts_ms_p50, percentile, source_parts_ms_p50, ts


def sbt_jars(project: str, jar_prefix: str) -> list[str]:
    """The jars of a jars-only sbt project of this build that pyspark does not ship."""
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    run = subprocess.run(
        [str(REPO / "dev" / "sbt-classpath"), project, jar_prefix, str(pyspark_jars)],
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.strip().split(",")


def read_stream(
    spark: SparkSession, kafka: Kafka, source: str, topic: str, group_prefix: str = "bench-share"
) -> DataStreamReader:
    """`source` ("kafka-share" or "kafka") on `topic` from the earliest record; kafka-share in a new group."""
    reader = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
    )
    if source == "kafka-share":
        return reader.option("kafka.share.group.id", new_group(kafka, group_prefix))
    return reader.option("startingOffsets", "earliest")


def kafka_share(
    spark: SparkSession,
    kafka: Kafka,
    scenario: str,
    topic: str,
    parallelism: int,
    records: int,
    work_ms: int = 0,
    options: dict[str, str] | None = None,
    checkpoint: str | None = None,
    async_progress: bool = False,
) -> dict[str, Any]:
    """A kafka-share drain (see drain) of `topic` in a new group, at `parallelism`, with `options`."""
    df = (
        read_stream(spark, kafka, "kafka-share", topic)
        .option("kafka.share.parallelism", str(parallelism))
        .options(**(options or {}))
        .load()
    )
    return drain(spark, scenario, df, records, kafka.record_size, work_ms, checkpoint, async_progress) | {
        "parallelism": parallelism
    }


def spark_kafka_source(
    spark: SparkSession,
    kafka: Kafka,
    scenario: str,
    topic: str,
    records: int,
    work_ms: int = 0,
    async_progress: bool = False,
) -> dict[str, Any]:
    """Spark's own `kafka` source with default options (one task per partition)."""
    df = read_stream(spark, kafka, "kafka", topic).load()
    # It keeps no acknowledgement state: its offsets live in the checkpoint.
    return drain(spark, scenario, df, records, kafka.record_size, work_ms, async_progress=async_progress) | {
        "commit_to_ack_ms_p50": None
    }


def drain(
    spark: SparkSession,
    scenario: str,
    df: DataFrame,
    records: int,
    record_size: int,
    work_ms: int,
    checkpoint: str | None = None,
    async_progress: bool = False,
) -> dict[str, Any]:
    """Drains `df` with Trigger.AvailableNow into the `noop` sink; figures from the query's progress.
    With `async_progress`, Spark's async progress tracking, which refuses Trigger.AvailableNow: the
    query then runs batches back to back and is stopped once it has read `records`, and ends with the
    batch that read the last of them."""
    if work_ms:
        df = df.selectExpr(
            "*",
            f"reflect('java.lang.Thread', 'sleep', cast({work_ms} as bigint)) as work",
        )
    reset_peak_heap(spark)
    started = time.time()
    writer = df.writeStream.format("noop")
    if async_progress:
        writer = writer.option("asyncProgressTrackingEnabled", "true").trigger(processingTime="0 seconds")
    else:
        writer = writer.trigger(availableNow=True)
    query = (writer.option("checkpointLocation", checkpoint) if checkpoint else writer).start()
    if async_progress:
        deadline = time.monotonic() + 1800
        while (
            sum(int(p["numInputRows"]) for p in query.recentProgress) < records
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        query.stop()
    else:
        query.awaitTermination()
    stopped = time.time()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    read = sum(int(p["numInputRows"]) for p in progress)
    last_read = ts(progress[-1]["timestamp"]) + progress[-1]["durationMs"]["triggerExecution"] / 1000
    # An AvailableNow drain ends with its query; one stopped from here, with its last batch with records.
    elapsed = (last_read if async_progress else stopped) - started
    # From the start of the first batch with records to the end of the last one.
    flowing_s = last_read - ts(progress[0]["timestamp"])
    # The batches that start in the second half of that time: past a query's start (its consumers
    # joining, their assignment), what a long-running stream would sustain. None for a single batch.
    halfway = last_read - flowing_s / 2
    second_half = [p for p in progress if ts(p["timestamp"]) >= halfway]
    steady = (
        sum(int(p["numInputRows"]) for p in second_half) / (last_read - ts(second_half[0]["timestamp"]))
        if second_half
        else None
    )
    durations = sorted(p["durationMs"]["triggerExecution"] for p in progress)
    # The records of a batch are accepted by the next batch's tasks, so commit-to-acknowledgement is
    # the gap from a batch's end to the start of the next one.
    gaps = [
        (ts(nxt["timestamp"]) - ts(cur["timestamp"])) * 1000 - cur["durationMs"]["triggerExecution"]
        for cur, nxt in zip(query.recentProgress, query.recentProgress[1:], strict=False)
        if cur["numInputRows"] > 0
    ]
    return {
        "scenario": scenario,
        "records": read,
        "seconds": round(elapsed, 2),
        "records_per_s": read / elapsed,
        "flowing_records_per_s": read / flowing_s,
        "steady_records_per_s": steady,
        "mb_per_s": read * record_size / elapsed / 2**20,
        "batches": len(progress),
        "batches_run": sum(1 for p in query.recentProgress if "addBatch" in p["durationMs"]),
        "batch_ms_p50": percentile(durations, 50),
        "batch_ms_p99": percentile(durations, 99),
        "commit_to_ack_ms_p50": percentile(sorted(gaps), 50),
        "batch_parts_ms_p50": batch_parts_ms_p50(progress),
        "source_parts_ms_p50": source_parts_ms_p50(query.recentProgress),
        # Each batch with records, as TIMELINE_COLUMNS: where in a drain its slow batches fall and
        # which part made them slow.
        "batch_timeline": [
            [
                round(ts(p["timestamp"]) - started, 2),
                int(p["numInputRows"]),
                p["durationMs"]["triggerExecution"],
                *(p["durationMs"].get(part, 0) for part in BATCH_PARTS),
            ]
            for p in progress
        ],
        "peak_heap_mb": round(peak_heap_mb(spark), 1),
        "complete": read == records,
        "async_progress": async_progress,
    }


def spark_batch_floor(
    spark: SparkSession, setting: str, seconds: int = 30, async_progress: bool = False
) -> dict[str, Any]:
    """Batches of 8,000 rows (what a kafka-share batch holds on 4 partitions at Kafka's default lock
    limit) from Spark's `rate-micro-batch` source into the `noop` sink, as fast as Spark runs them."""
    source = spark.readStream.format("rate-micro-batch").option("numPartitions", 4)
    df = source.option("rowsPerBatch", 8_000).load()
    query = (
        df.writeStream.format("noop")
        .option("asyncProgressTrackingEnabled", str(async_progress).lower())
        .start()
    )
    time.sleep(seconds)
    query.stop()
    progress = [p for p in query.recentProgress[5:] if p["numInputRows"] > 0]  # past the JIT's first batches
    durations = sorted(p["durationMs"]["triggerExecution"] for p in progress)
    return {
        "scenario": f"floor) Spark's rate-micro-batch source, {setting}",
        "partitions": 4,
        "records_per_batch_p50": percentile(sorted(float(p["numInputRows"]) for p in progress), 50),
        "batch_ms_p50": percentile(durations, 50),
        "batch_ms_p99": percentile(durations, 99),
        "batch_parts_ms_p50": batch_parts_ms_p50(progress),
    }


def idle_cpu(
    spark: SparkSession,
    kafka: Kafka,
    source: str,
    topic: str,
    records: int,
    trigger: str | None,
    seconds: int = 60,
) -> dict[str, Any]:
    """Share of one core the driver JVM (executor too, in local mode) uses while a drained stream idles."""
    writer = read_stream(spark, kafka, source, topic, "bench-idle").load().writeStream.format("noop")
    query = (writer.trigger(processingTime=trigger) if trigger else writer).start()
    while sum(p["numInputRows"] for p in query.recentProgress) < records:
        time.sleep(1)  # until the topic is drained
    time.sleep(10)  # and the stream has settled its last batch
    progress_before = len(query.recentProgress)
    measured = jvm_cpu(spark, seconds)
    # Spark also reports progress every 10 s while no batch runs; only a batch has an addBatch time.
    batches = sum(1 for p in query.recentProgress[progress_before:] if "addBatch" in p["durationMs"])
    query.stop()
    return {
        "scenario": f"idle) {source}, drained, {trigger or 'default'} trigger",
        "partitions": 4,
        **measured,
        "batches_while_idle": batches,
    }


@contextlib.contextmanager
def checkpoint_manager(spark: SparkSession, manager: str | None) -> Iterator[None]:
    """Queries started within write their checkpoint with `manager` (None: Spark's default manager)."""
    if manager:
        spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", manager)
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointFileManagerClass")
