"""`make bench`: kafka-share against Kafka's own share-consumer perf tool and Spark's own `kafka`
source, on the same data, in one run.

Scenarios (each share-group reader has a group of its own and reads from the earliest record):
  a) raw limit: `kafka-share-consumer-perf-test` with as many consumer threads as Spark consumers;
  b) kafka-share draining the topic with Trigger.AvailableNow into the `noop` sink, parallelism 1, 2, 4:
     with the group's default lock limit per partition (2000), with it raised to 4000 (the most a group
     may set on a broker with default settings), and to 10000 (the most Kafka allows; the local broker
     lets groups go that far with group.share.max.partition.max.record.locks=10000);
  c) Spark's own `kafka` source (spark-sql-kafka-0-10 4.2.0: Maven Central has no 4.3.0) draining the
     same topic the same way, with default options;
  d) 1 ms of work per record (Thread.sleep through SQL `reflect`, as an I/O-bound job would wait) on a
     1-partition topic, kafka-share at parallelism 1, 2 and 4 against the `kafka` source with default
     options: the case share groups exist for; kafka-share with default settings (with more consumers
     than partitions, each consumer polls at most its even share of the group's lock limit), the same
     with the lock limit raised to 4000, and tuned to spread records over consumers in smaller polls
     (`share.acquire.mode=record_limit`, `max.poll.records=250`) and to assign the partition to each
     consumer as it joins (`kafka.share.assignment.interval.ms=0`); and default and tuned under Spark's
     async progress tracking (as in the async section), which takes Spark's offset and commit logs off
     each batch's path, beside the `kafka` source the same way, and under Spark's FileSystem-based
     checkpoint manager (as in the floor section), which writes them at less cost;
  idle) a kafka-share query and a `kafka` source query on a drained topic, with the default trigger and
     with a 1 s trigger: the driver JVM's CPU use over 60 s, beside the same JVM's with no query running;
  e) the exactly-once strategies: the b) drain at parallelism 4 under each;
  f) the same on a smaller topic with the checkpoint on S3 (moto's S3 emulator, run locally; Hadoop's
     S3A client): the requests each batch makes to the store, Spark's own checkpoint files and the
     records log apart; with Spark's default checkpoint file manager, and with its manager for object
     stores (spark-hadoop-cloud's AbortableStreamBasedCheckpointFileManager).
  floor) what a micro-batch costs Spark whatever the source: Spark's `rate-micro-batch` source (4
     partitions, 8,000 rows a batch) into the `noop` sink for 30 s, with Spark's default checkpoint
     file manager and with its FileSystem-based one; and the b) drains at parallelism 1, 2 and 4 with
     the latter, at the default lock limit and at 10000. A kafka-share batch holds at most the group's
     lock limit per partition, so this cost bounds b.
  async) the floor's query and the b) drains with Spark's async progress tracking (the offset and commit
     logs written in the background, at most once a second), at the default lock limit and at 10000;
     with the default trigger (Spark refuses it with Trigger.AvailableNow), stopped once every record
     was read.
  firstbatch) the first batch of a new group's drain at P=2 and P=4, alternating settings over rounds:
     b) drains of a smaller topic (4 partitions and 1) with Kafka's assignment interval at its default
     (1 s) and at 0 (`kafka.share.assignment.interval.ms=0`), and d) drains with the default poll
     timeout (2 s, longer than that interval) and with `pollTimeoutMs=500` (shorter): how long the
     first batch takes, and on 1 partition when a batch first holds more records than one consumer
     may poll (its even share of the group's lock limit), i.e. when a second consumer had the partition.

Every drain also gives the p50 of each part of a batch's time in Spark's progress (`durationMs`):
planning, the offset log write (walCommit), running the batch (addBatch), the commit log write; and
each batch's start, rows, time and parts (`batch_timeline` in the JSON), from which the printed lines
name the batches that took over twice the p50, when they started and their longest part.

Throughput is given end to end (query start to end, as the perf tool measures), from the first
batch with records to the end of the last (a share consumer first has to join its group), and over
the batches that start in the second half of that time ("steady": past the query's start, what a
long-running stream would sustain).
Writes benchmarks/results/<UTC time>.json (git ignores the folder) and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import re
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamReader

from object_store import S3Emulator

REPO = Path(__file__).resolve().parent.parent
TOOL = str(REPO / "dev" / "kafka-tool")

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument(
    "--bootstrap-servers",
    default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
)
parser.add_argument("--jar", default=os.environ.get("SPARK_KAFKA_SHARE_JAR"))
parser.add_argument("--records", type=int, default=int(os.environ.get("BENCH_RECORDS", "1000000")))
parser.add_argument("--record-size", type=int, default=200)
parser.add_argument(
    "--work-records",
    type=int,
    default=int(os.environ.get("BENCH_WORK_RECORDS", "20000")),
)
parser.add_argument(
    "--s3-records",
    type=int,
    default=int(os.environ.get("BENCH_S3_RECORDS", "200000")),
)
parser.add_argument(
    "--first-batch-records",
    type=int,
    default=int(os.environ.get("BENCH_FIRST_BATCH_RECORDS", "200000")),
)
parser.add_argument("--first-batch-rounds", type=int, default=2)
parser.add_argument(
    "--sections",
    default="ab,floor,async,idle,d,firstbatch,strategies,objectstore",
    help="comma-separated: ab (raw vs kafka-share), idle, d (per-record work), strategies (their cost), "
    "objectstore (the strategies with the checkpoint on S3), floor (Spark's own cost of a micro-batch), "
    "async (b and the floor with Spark's async progress tracking), firstbatch (the first batch at P=2 "
    "and P=4: the assignment interval at 0, a poll timeout shorter than it)",
)
args = parser.parse_args()
SECTIONS = set(args.sections.split(","))
BOOTSTRAP = args.bootstrap_servers


def broker_version() -> str:
    """The Kafka release of the local broker, as dev/kafka-local last started it."""
    script = str(REPO / "dev" / "kafka-local" / "kafka-local")
    run = subprocess.run([script, "version"], capture_output=True, text=True, check=False)
    return run.stdout.strip() or "unknown"


def tool(*command: str, timeout: int = 1800) -> str:
    run = subprocess.run([TOOL, *command], capture_output=True, text=True, timeout=timeout, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"kafka-tool {' '.join(command[:1])} failed: {run.stderr[-2000:]}")
    return run.stdout


def make_topic(partitions: int, records: int) -> str:
    topic = f"bench-{partitions}p-{uuid.uuid4().hex[:6]}"
    tool(
        "topics",
        "--bootstrap-server",
        BOOTSTRAP,
        "--create",
        "--topic",
        topic,
        "--partitions",
        str(partitions),
    )
    tool(
        "producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(args.record_size),
        "--throughput",
        "-1",
        "--bootstrap-server",
        BOOTSTRAP,
        "--command-property",
        "linger.ms=20",
        "--command-property",
        "batch.size=262144",
    )
    return topic


def new_group(prefix: str) -> str:
    """A share group of its own, reading from the earliest record."""
    group = f"{prefix}-{uuid.uuid4().hex[:6]}"
    tool(
        "configs",
        "--bootstrap-server",
        BOOTSTRAP,
        "--alter",
        "--entity-type",
        "groups",
        "--entity-name",
        group,
        "--add-config",
        "share.auto.offset.reset=earliest",
    )
    return group


def raw_share_consumers(topic: str, threads: int, records: int) -> dict[str, Any]:
    """Kafka's share-consumer perf tool; its summary's fields 4 and 5 are MB/s and records/s."""
    out = tool(
        "share-consumer-perf-test",
        "--bootstrap-server",
        BOOTSTRAP,
        "--topic",
        topic,
        "--group",
        new_group("bench-raw"),
        "--num-records",
        str(records),
        "--threads",
        str(threads),
        "--timeout",
        "60000",
    )
    summary = [line for line in out.splitlines() if line and line[0].isdigit()][-1].split(",")
    return {
        "scenario": f"a) raw share consumers x{threads}",
        "records_per_s": float(summary[4]),
        "mb_per_s": float(summary[3]),
        "records": int(float(summary[5])),
    }


def reset_peak_heap(spark: SparkSession) -> None:
    for pool in spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():  # type: ignore[union-attr]
        pool.resetPeakUsage()


def peak_heap_mb(spark: SparkSession) -> float:
    pools = spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()  # type: ignore[union-attr]
    heap = [p.getPeakUsage().getUsed() for p in pools if str(p.getType()) == "Heap memory"]
    return sum(heap) / 2**20


# The group-level lock limit per partition (the source sets the group config): at the broker's default
# maximum for it, and at Kafka's.
LOCK_LIMITS: dict[str, dict[str, str]] = {
    "": {},
    " locks 4000": {"kafka.share.partition.max.record.locks": "4000"},
    " locks 10000": {"kafka.share.partition.max.record.locks": "10000"},
}
# d) with more consumers than partitions: smaller polls, each consumer assigned the partition as it joins.
TUNED_FOR_WORK = {
    "kafka.share.acquire.mode": "record_limit",
    "kafka.max.poll.records": "250",
    "kafka.share.assignment.interval.ms": "0",
}
# d) Spark's settings a kafka-share variant runs under: its default checkpoint file manager, that
# with async progress tracking, or its FileSystem-based manager (as in b's floor section).
DEFAULT_SPARK = "default"
ASYNC_PROGRESS = "async progress tracking"
FILE_SYSTEM_CHECKPOINTS = "FileSystem-based checkpoint manager"
# d) kafka-share's variants: name, source options, Spark's setting.
WORK_VARIANTS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("default", {}, DEFAULT_SPARK),
    ("default locks 4000", LOCK_LIMITS[" locks 4000"], DEFAULT_SPARK),
    ("tuned", TUNED_FOR_WORK, DEFAULT_SPARK),
    ("default", {}, ASYNC_PROGRESS),
    ("tuned", TUNED_FOR_WORK, ASYNC_PROGRESS),
    ("default", {}, FILE_SYSTEM_CHECKPOINTS),
    ("tuned", TUNED_FOR_WORK, FILE_SYSTEM_CHECKPOINTS),
)


def work_variant(name: str, setting: str) -> str:
    """A d) variant's name: its source options' name, then Spark's setting unless that is the default."""
    return name if setting == DEFAULT_SPARK else f"{name} {setting}"


# firstbatch) b's and d's settings, each against the default: the group's assignment interval, which
# delays a new consumer's partitions, and a first poll that ends before that interval does.
FIRST_BATCH_VARIANTS: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "b": (("default", {}), ("assignment interval 0", {"kafka.share.assignment.interval.ms": "0"})),
    "d": (("default", {}), ("pollTimeoutMs 500", {"pollTimeoutMs": "500"})),
}
# Kafka's default group.share.partition.max.record.locks: with more consumers than partitions, each
# polls at most its even share of it.
KAFKA_DEFAULT_LOCK_LIMIT = 2000


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
    spark: SparkSession, source: str, topic: str, group_prefix: str = "bench-share"
) -> DataStreamReader:
    """`source` ("kafka-share" or "kafka") on `topic` from the earliest record; kafka-share in a new group."""
    reader = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", topic)
    )
    if source == "kafka-share":
        return reader.option("kafka.share.group.id", new_group(group_prefix))
    return reader.option("startingOffsets", "earliest")


def kafka_share(
    spark: SparkSession,
    scenario: str,
    topic: str,
    parallelism: int,
    records: int,
    work_ms: int = 0,
    options: dict[str, str] | None = None,
    checkpoint: str | None = None,
    async_progress: bool = False,
) -> dict[str, Any]:
    df = (
        read_stream(spark, "kafka-share", topic)
        .option("kafka.share.parallelism", str(parallelism))
        .options(**(options or {}))
        .load()
    )
    return drain(spark, scenario, df, records, work_ms, checkpoint, async_progress) | {
        "parallelism": parallelism
    }


def lock_limit_drain(
    spark: SparkSession,
    topic: str,
    partitions: int,
    consumers: int,
    variant: str,
    setting: str = "",
    async_progress: bool = False,
) -> dict[str, Any]:
    """A b) drain at one of LOCK_LIMITS, under whatever other `setting` the caller has made."""
    scenario = f"b) kafka-share{variant} P={consumers}{setting}"
    limit = LOCK_LIMITS[variant]
    share = kafka_share(
        spark, scenario, topic, consumers, args.records, 0, limit, async_progress=async_progress
    )
    return share | {"partitions": partitions, "variant": (variant.strip() or "default") + setting}


def spark_kafka_source(
    spark: SparkSession,
    scenario: str,
    topic: str,
    records: int,
    work_ms: int = 0,
    async_progress: bool = False,
) -> dict[str, Any]:
    """Spark's own `kafka` source with default options (one task per partition)."""
    df = read_stream(spark, "kafka", topic).load()
    # It keeps no acknowledgement state: its offsets live in the checkpoint.
    return drain(spark, scenario, df, records, work_ms, async_progress=async_progress) | {
        "commit_to_ack_ms_p50": None
    }


def first_batch_drains(spark: SparkSession) -> list[dict[str, Any]]:
    """firstbatch) each of FIRST_BATCH_VARIANTS at P=2 and P=4, the settings alternating within each
    round so that a warming JVM favours neither."""
    b_topics = {p: make_topic(p, args.first_batch_records) for p in (4, 1)}
    work_topic = make_topic(1, args.work_records)
    kinds = (("b", b_topics, args.first_batch_records, 0), ("d", {1: work_topic}, args.work_records, 1))
    measured = []
    for round_number in range(1, args.first_batch_rounds + 1):
        for kind, topics, records, work_ms in kinds:
            for (partitions, topic), consumers, (setting, options) in itertools.product(
                topics.items(), (2, 4), FIRST_BATCH_VARIANTS[kind]
            ):
                scenario = f"firstbatch) {kind} {setting} P={consumers} round {round_number}"
                result = kafka_share(spark, scenario, topic, consumers, records, work_ms, options)
                timeline = result["batch_timeline"]
                # On 1 partition: when a batch first held the records of more than one consumer.
                one_consumer_most = KAFKA_DEFAULT_LOCK_LIMIT // consumers
                shared = (
                    next((start for start, rows, *_ in timeline if rows > one_consumer_most), None)
                    if partitions == 1
                    else None
                )
                measured.append(
                    result
                    | {
                        "partitions": partitions,
                        "first_batch_setting": f"{kind} {setting}",
                        "first_batch_start_s": timeline[0][0],
                        "first_batch_ms": float(timeline[0][2]),
                        "shared_from_s": shared,
                    }
                )
                show(measured[-1])
    return measured


def drain(
    spark: SparkSession,
    scenario: str,
    df: DataFrame,
    records: int,
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
    last_read = _ts(progress[-1]["timestamp"]) + progress[-1]["durationMs"]["triggerExecution"] / 1000
    # An AvailableNow drain ends with its query; one stopped from here, with its last batch with records.
    elapsed = (last_read if async_progress else stopped) - started
    # From the start of the first batch with records to the end of the last one.
    flowing_s = last_read - _ts(progress[0]["timestamp"])
    # The batches that start in the second half of that time: past a query's start (its consumers
    # joining, their assignment), what a long-running stream would sustain. None for a single batch.
    halfway = last_read - flowing_s / 2
    second_half = [p for p in progress if _ts(p["timestamp"]) >= halfway]
    steady = (
        sum(int(p["numInputRows"]) for p in second_half) / (last_read - _ts(second_half[0]["timestamp"]))
        if second_half
        else None
    )
    durations = sorted(p["durationMs"]["triggerExecution"] for p in progress)
    # The records of a batch are accepted by the next batch's tasks, so commit-to-acknowledgement is
    # the gap from a batch's end to the start of the next one.
    gaps = [
        (_ts(nxt["timestamp"]) - _ts(cur["timestamp"])) * 1000 - cur["durationMs"]["triggerExecution"]
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
        "mb_per_s": read * args.record_size / elapsed / 2**20,
        "batches": len(progress),
        "batches_run": sum(1 for p in query.recentProgress if "addBatch" in p["durationMs"]),
        "batch_ms_p50": _percentile(durations, 50),
        "batch_ms_p99": _percentile(durations, 99),
        "commit_to_ack_ms_p50": _percentile(sorted(gaps), 50),
        "batch_parts_ms_p50": batch_parts_ms_p50(progress),
        # Each batch with records, as TIMELINE_COLUMNS: where in a drain its slow batches fall and
        # which part made them slow.
        "batch_timeline": [
            [
                round(_ts(p["timestamp"]) - started, 2),
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


# The parts of a batch's time in Spark's progress, in the order a batch runs them.
BATCH_PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
# A batch of a drain's `batch_timeline`: its start in s after the query's start, rows, ms, and the ms
# of each of BATCH_PARTS.
TIMELINE_COLUMNS = ("start_s", "rows", "ms", *BATCH_PARTS)


def batch_parts_ms_p50(progress: list[dict[str, Any]]) -> dict[str, float | None]:
    return {
        part: _percentile(sorted(p["durationMs"].get(part, 0) for p in progress), 50) for part in BATCH_PARTS
    }


def show(measured: dict[str, Any] | list[dict[str, Any]]) -> None:
    """Prints what a section measured as it ends, without the batch timelines (they go to the file)."""
    drains = measured if isinstance(measured, list) else [measured]
    print(json.dumps([{k: v for k, v in r.items() if k != "batch_timeline"} for r in drains]), flush=True)


def write_results(out: Path, meta: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """Indented JSON with every list of numbers (a batch of a timeline) on one line."""
    text = json.dumps({"meta": meta, "results": results}, indent=2)
    out.write_text(re.sub(r"\[[-+0-9.eE,\s]*\]", lambda m: json.dumps(json.loads(m.group(0))), text))


def slow_batches(timeline: list[list[float]], p50_ms: float) -> list[tuple[int, float, float, str]]:
    """The batches of a drain's timeline that took over twice its p50: (number from 1, start, ms, the
    part of the batch that took longest)."""
    return [
        (i, start, ms, BATCH_PARTS[parts.index(max(parts))])
        for i, (start, _, ms, *parts) in enumerate(timeline, 1)
        if ms > 2 * p50_ms
    ]


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
        "records_per_batch_p50": _percentile(sorted(float(p["numInputRows"]) for p in progress), 50),
        "batch_ms_p50": _percentile(durations, 50),
        "batch_ms_p99": _percentile(durations, 99),
        "batch_parts_ms_p50": batch_parts_ms_p50(progress),
    }


def idle_cpu(
    spark: SparkSession, source: str, topic: str, records: int, trigger: str | None, seconds: int = 60
) -> dict[str, Any]:
    """Share of one core the driver JVM (executor too, in local mode) uses while a drained stream idles."""
    writer = read_stream(spark, source, topic, "bench-idle").load().writeStream.format("noop")
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


def jvm_cpu(spark: SparkSession, seconds: int) -> dict[str, Any]:
    """The driver JVM's CPU use over `seconds`, as a share of one core: in all, and by thread role
    (from Linux's per-thread counters, so the JVM's own threads are split into the JIT compiler and
    the rest). A full GC first, so that the garbage of the drains before is not billed to it."""
    jvm = spark._jvm
    assert jvm is not None
    jvm.java.lang.System.gc()
    time.sleep(2)
    jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
    threads_before, cpu_before = _thread_cpu_seconds(jvm_pid), _cpu_seconds(jvm_pid)
    started = time.monotonic()
    time.sleep(seconds)
    cpu_s, threads = _cpu_seconds(jvm_pid) - cpu_before, _thread_cpu_seconds(jvm_pid)
    elapsed = time.monotonic() - started
    by_role: dict[str, float] = {}
    for tid, (name, cpu) in threads.items():
        role = _thread_role(name)
        by_role[role] = by_role.get(role, 0.0) + cpu - threads_before.get(tid, (name, 0.0))[1]
    # Threads that ended during the window (Spark's idle task threads) are in the process's total only.
    by_role["other threads"] = by_role.get("other threads", 0.0) + cpu_s - sum(by_role.values())
    return {
        "core_share_pct": 100 * cpu_s / elapsed,
        "core_share_pct_by_thread": {role: round(100 * cpu / elapsed, 2) for role, cpu in by_role.items()},
    }


def _thread_cpu_seconds(pid: int) -> dict[str, tuple[str, float]]:
    """User plus system CPU time of each thread of a process, with its (15-character) name, by thread id."""
    cpu: dict[str, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:
            continue  # the thread ended
        cpu[task.name] = (stat[stat.index("(") + 1 : stat.rindex(")")], _stat_cpu_seconds(stat))
    return cpu


def _thread_role(name: str) -> str:
    if name.startswith("stream executio"):
        return "Spark's trigger loop"
    if name.startswith(("consumer_backgr", "kafka-admin-cli", "kafka-coordinat")):
        return "Kafka clients"
    if name.startswith("kafka-share-"):
        return "kafka-share lock renewer and janitor"
    if name.startswith(("C1 CompilerThre", "C2 CompilerThre")):
        return "JIT compiler"
    if name.startswith(("G1 ", "GC Thread", "VM ", "Monitor Deflati", "Service Thread", "Common-Cleaner")):
        return "GC and VM"
    return "other threads"


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from Linux's /proc."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def _stat_cpu_seconds(stat: str) -> float:
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ts(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _percentile(sorted_values: list[float], pct: int) -> float | None:
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[pct - 1]


STRATEGIES = ("none", "checkpoint-dedup", "two-phase-commit")
FILE_SYSTEM_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
# f) Spark's checkpoint file manager for object stores: writes a file in place instead of renaming it.
ABORTABLE_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"


@contextlib.contextmanager
def checkpoint_manager(spark: SparkSession, manager: str | None) -> Iterator[None]:
    """Queries started within write their checkpoint with `manager` (None: Spark's default manager)."""
    if manager:
        spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", manager)
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointFileManagerClass")


S3_VARIANTS = (
    *((strategy, "default") for strategy in STRATEGIES),
    ("none", "abortable"),
    ("two-phase-commit", "abortable"),
)


def main() -> None:
    jars = [args.jar, *sbt_jars("sparkKafkaSource", "spark-sql-kafka-0-10_")]
    s3 = S3Emulator() if "objectstore" in SECTIONS else None
    if s3:
        jars += sbt_jars("objectStore", "hadoop-aws-")
    builder = (
        SparkSession.builder.master("local[4]")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        # Keep every batch's progress, for the batch-duration percentiles.
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
    )
    for key, value in (s3.spark_conf() if s3 else {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    results: list[dict[str, Any]] = []
    topic_4p = make_topic(4, args.records)
    topics = {4: topic_4p, 1: make_topic(1, args.records)} if "ab" in SECTIONS else {}
    for partitions, topic in topics.items():
        source = spark_kafka_source(spark, "c) kafka source", topic, args.records)
        results.append(source | {"partitions": partitions})
        for consumers in (1, 2, 4):
            results.append(raw_share_consumers(topic, consumers, args.records) | {"partitions": partitions})
            for variant in LOCK_LIMITS:
                results.append(lock_limit_drain(spark, topic, partitions, consumers, variant))
        show([r for r in results if r.get("partitions") == partitions])
    # Spark's own cost of a batch, with its default checkpoint file manager and its FileSystem-based
    # one (on a local disk, Hadoop's FileContext rename starts a `readlink` process when Hadoop has no
    # native library, as here).
    if "floor" in SECTIONS:
        measured = [spark_batch_floor(spark, "default checkpoint manager")]
        with checkpoint_manager(spark, FILE_SYSTEM_MANAGER):
            measured.append(spark_batch_floor(spark, "FileSystem-based checkpoint manager"))
            # b) again with that manager, at Kafka's default lock limit and at the most Kafka allows:
            # the two tunings together (on the 4-partition topic only, without the ab section).
            for partitions, topic in (topics or {4: topic_4p}).items():
                for consumers in (1, 2, 4):
                    for variant in ("", " locks 10000"):
                        manager = ", FileSystem-based checkpoint manager"
                        result = lock_limit_drain(spark, topic, partitions, consumers, variant, manager)
                        measured.append(result)
        results += measured
        show(measured)
    # b) again with Spark's async progress tracking (writeStream option asyncProgressTrackingEnabled, for
    # the noop, console, memory and Kafka sinks): the offset and commit logs are written in the
    # background, at most once a second, instead of twice a batch.
    if "async" in SECTIONS:
        measured = [spark_batch_floor(spark, "async progress tracking", async_progress=True)]
        for partitions, topic in (topics or {4: topic_4p}).items():
            for consumers in (1, 2, 4):
                for variant in ("", " locks 10000"):
                    setting = ", async progress tracking"
                    result = lock_limit_drain(
                        spark, topic, partitions, consumers, variant, setting, async_progress=True
                    )
                    measured.append(result)
        results += measured
        show(measured)
    for trigger in (None, "1 second") if "idle" in SECTIONS else ():
        for source in ("kafka-share", "kafka"):
            results.append(idle_cpu(spark, source, topic_4p, args.records, trigger))
        show(results[-2:])
    if "idle" in SECTIONS:
        # The same JVM with no query running, measured after the idle queries (before them, it is
        # still busy after the drains, compiling and collecting): what an idle stream adds is
        # measured against this.
        time.sleep(10)
        baseline = jvm_cpu(spark, 60)
        results.append({"scenario": "idle) no query (the JVM's own use)", "partitions": 4, **baseline})
        show(results[-1])
    if "d" in SECTIONS:
        work_topic = make_topic(1, args.work_records)
        # The `kafka` source both ways, so that each kafka-share variant has its like to compare with.
        for async_progress in (False, True):
            variant = "kafka source" + (" async progress tracking" if async_progress else "")
            source = spark_kafka_source(
                spark, f"d) 1 ms/record {variant}", work_topic, args.work_records, 1, async_progress
            )
            results.append(source | {"partitions": 1, "variant": variant})
            show(results[-1])
        for name, options, setting in WORK_VARIANTS:
            manager = FILE_SYSTEM_MANAGER if setting == FILE_SYSTEM_CHECKPOINTS else None
            for consumers in (1, 2, 4):
                scenario = f"d) 1 ms/record {work_variant(name, setting)} P={consumers}"
                with checkpoint_manager(spark, manager):
                    result = kafka_share(
                        spark,
                        scenario,
                        work_topic,
                        consumers,
                        args.work_records,
                        1,
                        options,
                        async_progress=setting == ASYNC_PROGRESS,
                    )
                variant = {"variant": f"work {work_variant(name, setting)}", "spark_setting": setting}
                results.append(result | {"partitions": 1} | variant)
                show(results[-1])
    if "firstbatch" in SECTIONS:
        results += first_batch_drains(spark)
    # The cost of each exactly-once strategy: the same drain at P=4, each with a group of its own.
    for strategy in STRATEGIES if "strategies" in SECTIONS else ():
        options = {"kafka.share.exactly.once.strategy": strategy}
        result = kafka_share(spark, f"e) strategy {strategy} P=4", topic_4p, 4, args.records, 0, options)
        results.append(result | {"partitions": 4, "strategy": strategy})
        show(results[-1])
    # f) The same with the checkpoint on S3: what each batch asks of the store. A first write starts
    # S3A's client, so that the first strategy does not pay for it.
    if s3:
        spark.range(1).write.mode("overwrite").json(f"s3a://{S3Emulator.bucket}/warm-up")
        s3_topic = make_topic(4, args.s3_records)
        for strategy, manager in S3_VARIANTS:
            name = f"{strategy}-{manager}-{uuid.uuid4().hex[:6]}"
            options = {"kafka.share.exactly.once.strategy": strategy}
            scenario = f"f) strategy {strategy} P=4, checkpoint on S3, {manager} checkpoint manager"
            checkpoint = f"s3a://{S3Emulator.bucket}/{name}"
            with checkpoint_manager(spark, ABORTABLE_MANAGER if manager == "abortable" else None):
                result = kafka_share(spark, scenario, s3_topic, 4, args.s3_records, 0, options, checkpoint)
            requests = s3.requests_under(name)
            per_batch = {
                origin: sum(verbs.values()) / result["batches_run"] for origin, verbs in requests.items()
            }
            on_s3 = {
                "strategy_on_s3": strategy,
                "checkpoint_manager": manager,
                "s3_requests": requests,
                "s3_requests_per_batch": per_batch,
            }
            results.append(result | {"partitions": 4} | on_s3)
            show(results[-1])
    spark.stop()
    if s3:
        s3.stop()

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "benchmarks" / "results" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "records": args.records,
        "record_size": args.record_size,
        "work_records": args.work_records,
        "s3_records": args.s3_records,
        "sections": sorted(SECTIONS),
        "jar": args.jar,
        "machine": f"{os.cpu_count()} cores",
        "spark": "4.3.0 local[4]",
        "kafka": f"{broker_version()} single node",
        "batch_timeline_columns": TIMELINE_COLUMNS,
    }
    write_results(out, meta, results)
    print_table(results)
    print(f"\nwritten to {out.relative_to(REPO)}")


def print_table(results: list[dict[str, Any]]) -> None:
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:,.0f}" if isinstance(v, float) else str(v)

    columns = [
        "scenario",
        "partitions",
        "records_per_s",
        "flowing_records_per_s",
        "steady_records_per_s",
        "mb_per_s",
        "batch_ms_p50",
        "batch_ms_p99",
        "commit_to_ack_ms_p50",
        "peak_heap_mb",
        "core_share_pct",
    ]
    print("\n" + " | ".join(columns))
    for r in results:
        print(" | ".join(fmt(r.get(c)) for c in columns))
    raw = {(r["partitions"], r["scenario"][-1]): r for r in results if r["scenario"].startswith("a)")}
    source = {r["partitions"]: r for r in results if r["scenario"].startswith("c)")}
    for r in results:
        if r.get("batch_parts_ms_p50"):
            parts = ", ".join(f"{part} {fmt(ms)}" for part, ms in r["batch_parts_ms_p50"].items())
            print(f"{r['scenario']}, {r['partitions']} partitions, p50 ms: {parts}")
    for r in results:
        if len(r.get("batch_timeline") or []) > 1:  # a one-batch drain (the `kafka` source's) has none slow
            slow = slow_batches(r["batch_timeline"], r["batch_ms_p50"])
            where = ", ".join(
                f"#{i} at {start:.1f} s ({ms:,.0f} ms, {part})" for i, start, ms, part in slow[:8]
            )
            print(
                f"{r['scenario']}, {r['partitions']} partitions: {len(slow)} of {len(r['batch_timeline'])} "
                f"batches over twice the p50 ({fmt(r['batch_ms_p50'])} ms){': ' + where if slow else ''}"
                f"{', ...' if len(slow) > 8 else ''}"
            )
    for r in results:
        if r["scenario"].startswith("b)") and (r["partitions"], str(r["parallelism"])) in raw:
            a, c = raw[(r["partitions"], str(r["parallelism"]))], source[r["partitions"]]
            b_a = r["records_per_s"] / a["records_per_s"]
            print(
                f"{r['scenario']}, {r['partitions']} partitions: b/a {b_a:.2f}, "
                f"b/c {r['records_per_s'] / c['records_per_s']:.2f} "
                f"(from the first batch: b/c {r['flowing_records_per_s'] / c['flowing_records_per_s']:.2f})"
            )
    for name, _, setting in WORK_VARIANTS:
        variant = f"work {work_variant(name, setting)}"
        work = {r["parallelism"]: r for r in results if r.get("variant") == variant}
        # The `kafka` source reads the topic in one batch, so a checkpoint manager hardly touches it.
        work_source = next(
            (
                r
                for r in results
                if r.get("variant", "").startswith("kafka source")
                and r.get("async_progress") == (setting == ASYNC_PROGRESS)
            ),
            None,
        )
        if work and work_source:
            for measure in ("records_per_s", "flowing_records_per_s", "steady_records_per_s"):
                p1, p4 = work[1][measure], work[4][measure]
                if None in (p1, work[2][measure], p4):
                    continue
                line = f"d {variant} ({measure}): P2/P1 {work[2][measure] / p1:.2f}, P4/P1 {p4 / p1:.2f}"
                if work_source[measure]:  # a single batch has no steady figure
                    line += f", P4 against the kafka source {p4 / work_source[measure]:.2f}"
                print(line)
    # A setting may slow P=1 (the tuned one's small polls), so also the fastest P=4 against the
    # fastest P=1, under each of Spark's settings.
    for setting, measure in itertools.product(
        (DEFAULT_SPARK, ASYNC_PROGRESS, FILE_SYSTEM_CHECKPOINTS), ("records_per_s", "steady_records_per_s")
    ):
        drains = [r for r in results if r.get("spark_setting") == setting and r[measure] is not None]
        fastest = {
            p: max((r for r in drains if r["parallelism"] == p), key=lambda r: r[measure], default=None)
            for p in (1, 4)
        }
        if fastest[1] and fastest[4]:
            print(
                f"d fastest P=4 against fastest P=1{'' if setting == DEFAULT_SPARK else f' ({setting})'} "
                f"({measure}): {fastest[4][measure] / fastest[1][measure]:.2f} "
                f"({fastest[4]['scenario']} / {fastest[1]['scenario']})"
            )
    for r in results:
        if "first_batch_setting" in r:
            shared = r["shared_from_s"]
            print(
                f"{r['scenario']}, {r['partitions']} partitions: {fmt(r['records_per_s'])} records/s, "
                f"first batch at {r['first_batch_start_s']:.1f} s, {fmt(r['first_batch_ms'])} ms"
                + (f", more than one consumer's records from {shared:.1f} s" if shared is not None else "")
            )
    baseline = next((r for r in results if r["scenario"].startswith("idle) no query")), None)
    for r in results:
        if baseline and r["scenario"].startswith("idle)") and r is not baseline:
            total = r["core_share_pct"]
            added = total - baseline["core_share_pct"]
            jit = r["core_share_pct_by_thread"].get("JIT compiler", 0.0)
            print(
                f"{r['scenario']}: {total:.2f}% of a core, {added:.2f}% over the JVM with no query, "
                f"{total - jit:.2f}% without the JIT compiler"
            )
    groups = [("e", [r for r in results if "strategy" in r])]
    for manager in ("default", "abortable"):
        on_s3 = [r for r in results if r.get("checkpoint_manager") == manager]
        groups.append((f"f, checkpoint on S3, {manager} checkpoint manager", on_s3))
    for label, group in groups:
        by_strategy = {r.get("strategy", r.get("strategy_on_s3")): r for r in group}
        for strategy, r in by_strategy.items():
            cost = r["records_per_s"] / by_strategy["none"]["records_per_s"]
            print(
                f"{label} {strategy}: {cost:.2f} of none's throughput, batch p50 {fmt(r['batch_ms_p50'])} ms"
            )
            for origin, per_batch in r.get("s3_requests_per_batch", {}).items():
                print(f"    {origin}: {per_batch:.1f} requests a batch {r['s3_requests'][origin]}")


if __name__ == "__main__":
    main()
