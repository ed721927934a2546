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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from .kafka_tools import TOOL, Kafka, new_topic
from .spark_queries import read_stream
from .timings import percentile

SOURCES = ("kafka-share", "kafka")
# The real-time batch duration: a turnover every 10 s. A run has few turnovers, each holding back a
# few hundred records, so its p99 varies from run to run: these runs are repeated, the sources taking
# turns, and their percentiles taken over every repeat's records.
REAL_TIME_BATCH = "10 seconds"
# Within one real-time batch: no turnover in the window.
WITHIN_A_BATCH = "5 minutes"
WARM_UP_S = 5
# Each source's unrecorded real-time run before the measured ones: two turnovers.
WARM_UP_RUN_S = 20


@dataclass(frozen=True)
class Stream:
    """One latency run's query and load: `source` read at `trigger` (real-time with `batch`-long
    batches, or "default"), `rate` records a second on `partitions` for `seconds`."""

    source: str
    trigger: str
    batch: str
    rate: int
    partitions: int
    seconds: int

    @property
    def name(self) -> str:
        batches = f" {self.batch} batches" if self.trigger == "real-time" else ""
        return f"latency) {self.source}, {self.trigger}{batches}"


def latency(
    spark: SparkSession,
    kafka: Kafka,
    rates: list[int],
    partitions: list[int],
    seconds: int,
    repeats: int,
) -> list[dict[str, Any]]:
    """At each rate and partition count, each source `seconds` long in real-time mode with 10 s
    batches (`repeats` times, taking turns), at the default trigger, and in real-time mode within one
    batch; per source and mode the latency's p50, p99 and max and the rate sustained."""
    # Unrecorded: the first real-time query of a JVM pays for loading and compiling Spark's code at its
    # first turnovers, which would count against whichever source runs first.
    for source in SOURCES:
        run(spark, kafka, Stream(source, "real-time", REAL_TIME_BATCH, rates[0], 1, WARM_UP_RUN_S))
    # (trigger, real-time batch duration, runs of each source)
    modes = [("real-time", REAL_TIME_BATCH, repeats), ("default", "", 1), ("real-time", WITHIN_A_BATCH, 1)]
    results = []
    for rate in rates:
        for parts in partitions:
            for trigger, batch, times in modes:
                streams = [Stream(source, trigger, batch, rate, parts, seconds) for source in SOURCES]
                turns = [(stream, run(spark, kafka, stream)) for _ in range(times) for stream in streams]
                results += [summary(stream, [r for s, r in turns if s == stream]) for stream in streams]
    return results


def run(spark: SparkSession, kafka: Kafka, stream: Stream) -> tuple[int, list[float]]:
    """One query: the rows its sink wrote, and the latencies of those written after the warm-up."""
    topic = new_topic(kafka, stream.partitions, "bench-latency")
    out = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    query = start(spark, kafka, stream, topic, out)
    try:
        time.sleep(WARM_UP_S)  # the consumers join before the records come
        produced_at = time.time()
        produce(kafka, topic, stream.rate, stream.seconds)
        time.sleep(2)  # the last records reach the sink
    finally:
        query.stop()
    rows = read_rows(out)
    shutil.rmtree(out, ignore_errors=True)
    steady_from = (produced_at + WARM_UP_S) * 1000
    return len(rows), [latency for written_at, latency in rows if written_at >= steady_from]


def summary(stream: Stream, runs: list[tuple[int, list[float]]]) -> dict[str, Any]:
    """The percentiles over every run's latencies, each run's own p99, and the rate each run sustained."""
    steady = sorted(latency for _, latencies in runs for latency in latencies)
    rows = sum(written for written, _ in runs)
    return {
        "scenario": stream.name,
        "rate": stream.rate,
        "partitions": stream.partitions,
        "runs": len(runs),
        "records": rows,
        "produced": stream.rate * stream.seconds * len(runs),
        "latency_ms_p50": percentile(steady, 50),
        "latency_ms_p99": percentile(steady, 99),
        "latency_ms_max": steady[-1] if steady else None,
        "latency_ms_p99_per_run": [percentile(sorted(latencies), 99) for _, latencies in runs],
        "records_per_s": rows / (stream.seconds * len(runs)),
    }


def start(spark: SparkSession, kafka: Kafka, stream: Stream, topic: str, out: Path) -> StreamingQuery:
    reader = read_stream(spark, kafka, stream.source, topic, "bench-latency")
    if stream.source == "kafka-share":
        reader = reader.option("kafka.share.parallelism", str(stream.partitions))
    delivery = "deliveryCount" if stream.source == "kafka-share" else "1 as deliveryCount"
    df = reader.load().selectExpr("cast(value as string) value", delivery, "timestamp")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    writer = df._jdf.writeStream().foreach(jvm.example.sinks.RowFileWriter(str(out), "none", 0))
    writer = writer.option("checkpointLocation", str(out / "checkpoint"))
    if stream.trigger == "real-time":
        writer = writer.outputMode("update").trigger(
            jvm.org.apache.spark.sql.streaming.Trigger.RealTime(stream.batch)
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
