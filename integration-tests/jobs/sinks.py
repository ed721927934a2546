"""The drain application's sinks besides its per-batch files, each idempotent per batch id in its own
way: `upsert`, the `idempotent` strategy's JDBC recipe (test_fault_matrix.py), and Spark's Kafka sink
(test_driver_kill.py)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from faults import slowly
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery


def upsert(batch: DataFrame, db: Path, out: Path) -> list[list[object]]:
    """Upserts the batch's rows into SQLite table `records` of `db` (queries may share one), keyed by
    (topic, partition, offset); appends every delivery to `<out>/deliveries.json` lines, so that the
    test can count what reached the sink. Returns the batch's (value, deliveryCount) pairs."""
    rows = batch.selectExpr(
        "topic", "partition", "offset", "cast(value as string) v", "deliveryCount"
    ).collect()
    # Another query's job may be writing the same file: wait for its lock rather than fail.
    with sqlite3.connect(db, timeout=60) as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS records (topic TEXT, partition INT, offset INT, value TEXT, "
            "delivery_count INT, PRIMARY KEY (topic, partition, offset))"
        )
        connection.executemany(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?) ON CONFLICT (topic, partition, offset) "
            "DO UPDATE SET value = excluded.value, delivery_count = excluded.delivery_count",
            [(r.topic, r.partition, r.offset, r.v, r.deliveryCount) for r in rows],
        )
    pairs: list[list[object]] = [[r.v, r.deliveryCount] for r in rows]
    with open(out / "deliveries.json", "a") as deliveries:
        deliveries.writelines(json.dumps(pair) + "\n" for pair in pairs)
    return pairs


def run_into_kafka(
    records: DataFrame,
    bootstrap: str,
    topic: str,
    checkpoint: str,
    out: Path,
    async_progress: bool,
    kill_mid_stream: Callable[[], None] | None,
) -> StreamingQuery:
    """Runs Spark's Kafka sink with the default trigger, writing each record's value to `topic` with its
    deliveryCount in a header of that name, 10 ms a record, until `<out>/done` appears (180 s at most).
    `async_progress`: under Spark's async progress tracking (offset and commit logs written in the
    background, here only the first batch's: a 10-minute interval). `kill_mid_stream` runs 1 s after
    the query reported its second batch with records, while the next one is being written (the id of
    that second batch goes to `<out>/killed-after-batch`)."""
    writer = (
        records.select(
            slowly(F.col("value").cast("string")).alias("value"),
            F.array(
                F.struct(
                    F.lit("deliveryCount").alias("key"),
                    F.col("deliveryCount").cast("string").cast("binary").alias("value"),
                )
            ).alias("headers"),
        )
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)
    )
    if async_progress:
        writer = writer.option("asyncProgressTrackingEnabled", "true").option(
            "asyncProgressTrackingCheckpointIntervalMs", "600000"
        )
    query = writer.start()
    deadline = time.monotonic() + 180
    while query.isActive and not (out / "done").exists() and time.monotonic() < deadline:
        read = [progress["batchId"] for progress in query.recentProgress if progress["numInputRows"] > 0]
        if kill_mid_stream and len(read) >= 2:
            (out / "killed-after-batch").write_text(str(read[-1]))
            time.sleep(1)
            kill_mid_stream()
        time.sleep(0.2)
    query.stop()
    failure = query.exception()
    if failure:
        raise failure
    return query
