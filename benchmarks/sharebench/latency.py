"""Section `latency`: how long a record takes from its Kafka CreateTime to its row reaching the sink, at
a steady rate, for kafka-share and Spark's `kafka` source, each in real-time mode and at Spark's
default micro-batch trigger. The sink is the JVM foreach writer of integration-tests/jvm-helpers
(`example.sinks.RowFileWriter`), which writes each row as it gets it, with its latency measured in the
JVM; Kafka's producer perf tool produces at the rate.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from .kafka_tools import TOOL, Kafka, new_topic
from .spark_queries import read_stream
from .timings import percentile

# Each source in each mode: (source, trigger). The real-time batch duration: a turnover every 10 s.
RUNS = [
    ("kafka-share", "real-time"),
    ("kafka", "real-time"),
    ("kafka-share", "default"),
    ("kafka", "default"),
]
REAL_TIME_BATCH = "10 seconds"
# Within one real-time batch: no turnover in the window.
WITHIN_A_BATCH = "5 minutes"
WARM_UP_S = 5
# Each source's unrecorded real-time run before the measured ones: two turnovers.
WARM_UP_RUN_S = 20


def latency(
    spark: SparkSession, kafka: Kafka, rates: list[int], partitions: list[int], seconds: int
) -> list[dict[str, Any]]:
    """Every run of RUNS at each rate and partition count, and both sources in real-time mode within one
    batch, each `seconds` long; per run the latency's p50, p99 and max and the rate sustained."""
    # Unrecorded: the first real-time query of a JVM pays for loading and compiling Spark's code at its
    # first turnovers, which would count against whichever source runs first.
    for source in ("kafka-share", "kafka"):
        run(spark, kafka, source, "real-time", REAL_TIME_BATCH, rates[0], 1, WARM_UP_RUN_S)
    results = []
    for rate in rates:
        for parts in partitions:
            for source, trigger in RUNS:
                results.append(run(spark, kafka, source, trigger, REAL_TIME_BATCH, rate, parts, seconds))
            for source in ("kafka-share", "kafka"):
                results.append(run(spark, kafka, source, "real-time", WITHIN_A_BATCH, rate, parts, seconds))
    return results


def run(
    spark: SparkSession,
    kafka: Kafka,
    source: str,
    trigger: str,
    batch: str,
    rate: int,
    partitions: int,
    seconds: int,
) -> dict[str, Any]:
    topic = new_topic(kafka, partitions, "bench-latency")
    out = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    query = start(spark, kafka, source, trigger, batch, topic, partitions, out)
    try:
        time.sleep(WARM_UP_S)  # the consumers join before the records come
        produced_at = time.time()
        produce(kafka, topic, rate, seconds)
        time.sleep(2)  # the last records reach the sink
    finally:
        query.stop()
    rows = read_rows(out)
    shutil.rmtree(out, ignore_errors=True)
    steady = sorted(latency for written_at, latency in rows if written_at >= (produced_at + WARM_UP_S) * 1000)
    name = f"latency) {source}, {trigger}" + (f" {batch} batches" if trigger == "real-time" else "")
    return {
        "scenario": name,
        "rate": rate,
        "partitions": partitions,
        "records": len(rows),
        "produced": rate * seconds,
        "latency_ms_p50": percentile(steady, 50),
        "latency_ms_p99": percentile(steady, 99),
        "latency_ms_max": steady[-1] if steady else None,
        "records_per_s": len(rows) / seconds,
    }


def start(
    spark: SparkSession,
    kafka: Kafka,
    source: str,
    trigger: str,
    batch: str,
    topic: str,
    partitions: int,
    out: Path,
) -> StreamingQuery:
    reader = read_stream(spark, kafka, source, topic, "bench-latency")
    if source == "kafka-share":
        reader = reader.option("kafka.share.parallelism", str(partitions))
    delivery = "deliveryCount" if source == "kafka-share" else "1 as deliveryCount"
    df = reader.load().selectExpr("cast(value as string) value", delivery, "timestamp")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    writer = df._jdf.writeStream().foreach(jvm.example.sinks.RowFileWriter(str(out), "none", 0))
    writer = writer.option("checkpointLocation", str(out / "checkpoint"))
    if trigger == "real-time":
        writer = writer.outputMode("update").trigger(
            jvm.org.apache.spark.sql.streaming.Trigger.RealTime(batch)
        )
    return StreamingQuery(writer.start())


def produce(kafka: Kafka, topic: str, rate: int, seconds: int) -> None:
    """`rate` records a second for `seconds`, stamped with their CreateTime as they are sent."""
    producing = threading.Thread(
        target=subprocess.run,
        args=(
            [
                TOOL,
                "producer-perf-test",
                "--topic",
                topic,
                "--num-records",
                str(rate * seconds),
                "--record-size",
                "100",
                "--throughput",
                str(rate),
                "--bootstrap-server",
                kafka.bootstrap_servers,
                "--command-property",
                "linger.ms=0",
            ],
        ),
        kwargs={"capture_output": True, "check": True},
    )
    producing.start()
    producing.join()


def read_rows(out: Path) -> list[tuple[float, float]]:
    """(when written, ms since the epoch; latency, ms) of each row the sink wrote, from its files' lines
    `<value>,<deliveryCount>,<latency ms>,<written at ms>`."""
    rows = []
    for f in out.glob("part-*.csv"):
        for line in f.read_text().splitlines():
            *_, latency, written_at = line.split(",")
            rows.append((float(written_at), float(latency)))
    return rows
