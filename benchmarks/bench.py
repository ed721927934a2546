"""`make bench`: kafka-share against Kafka's own share-consumer perf tool, on the same data, in one run.

Scenarios (each reads with a share group of its own, from the earliest record):
  a) raw limit: `kafka-share-consumer-perf-test` with as many consumer threads as Spark consumers;
  b) kafka-share draining the topic with Trigger.AvailableNow into the `noop` sink, parallelism 1, 2, 4;
  d) 1 ms of work per record (Thread.sleep through SQL `reflect`, as an I/O-bound job would wait) on a
     1-partition topic, kafka-share at parallelism 1, 2 and 4: the case share groups exist for; once
     with default consumer settings and once tuned to spread records over consumers
     (`share.acquire.mode=record_limit`, `max.poll.records=250`).
  idle) a kafka-share query on a drained topic, with the default trigger and with a 1 s trigger:
     the driver JVM's CPU use over 20 s.
Spark's own `kafka` source (scenario c) is not measured: see docs/benchmarks.md.

Writes benchmarks/results/<UTC time>.json and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

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
    default=int(os.environ.get("BENCH_WORK_RECORDS", "10000")),
)
parser.add_argument(
    "--sections",
    default="ab,idle,d,strategies",
    help="comma-separated: ab (raw vs kafka-share), idle, d (per-record work), strategies (their cost)",
)
args = parser.parse_args()
SECTIONS = set(args.sections.split(","))
BOOTSTRAP = args.bootstrap_servers


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


TUNED_FOR_WORK = {"kafka.share.acquire.mode": "record_limit", "kafka.max.poll.records": "250"}


def kafka_share(
    spark: SparkSession,
    scenario: str,
    topic: str,
    parallelism: int,
    records: int,
    work_ms: int = 0,
    options: dict[str, str] | None = None,
) -> dict[str, Any]:
    df = (
        spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("kafka.share.group.id", new_group("bench-share"))
        .option("subscribe", topic)
        .option("kafka.share.parallelism", str(parallelism))
        .options(**(options or {}))
        .load()
    )
    if work_ms:
        df = df.selectExpr(
            "*",
            f"reflect('java.lang.Thread', 'sleep', cast({work_ms} as bigint)) as work",
        )
    reset_peak_heap(spark)
    started = time.monotonic()
    query = df.writeStream.format("noop").trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.monotonic() - started
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    read = int(query.lastProgress["sources"][0]["metrics"]["recordsAcquired"])
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
        "parallelism": parallelism,
        "records": read,
        "seconds": round(elapsed, 2),
        "records_per_s": read / elapsed,
        "mb_per_s": read * args.record_size / elapsed / 2**20,
        "batches": len(progress),
        "batch_ms_p50": _percentile(durations, 50),
        "batch_ms_p99": _percentile(durations, 99),
        "commit_to_ack_ms_p50": _percentile(sorted(gaps), 50),
        "peak_heap_mb": round(peak_heap_mb(spark), 1),
        "complete": read == records,
    }


def idle_cpu(spark: SparkSession, topic: str, trigger: str | None, seconds: int = 20) -> dict[str, Any]:
    """Share of one core the driver JVM (executor too, in local mode) uses while a drained stream idles."""
    df = (
        spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("kafka.share.group.id", new_group("bench-idle"))
        .option("subscribe", topic)
        .load()
    )
    writer = df.writeStream.format("noop")
    query = (writer.trigger(processingTime=trigger) if trigger else writer).start()
    jvm = spark._jvm
    assert jvm is not None
    jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
    while (
        int(query.lastProgress["sources"][0]["metrics"]["recordsAcquired"] if query.lastProgress else 0) == 0
    ):
        time.sleep(1)  # until the topic is drained once
    time.sleep(10)  # and the stream has settled its last batch
    batches_before, cpu_before, started = (
        query.lastProgress["batchId"],
        _cpu_seconds(jvm_pid),
        time.monotonic(),
    )
    time.sleep(seconds)
    cpu_s = _cpu_seconds(jvm_pid) - cpu_before
    batches = query.lastProgress["batchId"] - batches_before
    query.stop()
    return {
        "scenario": f"idle) drained stream, {trigger or 'default'} trigger",
        "partitions": 4,
        "core_share_pct": 100 * cpu_s / (time.monotonic() - started),
        "batches_while_idle": batches,
    }


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from Linux's /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ts(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _percentile(sorted_values: list[float], pct: int) -> float | None:
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[pct - 1]


def main() -> None:
    spark = (
        SparkSession.builder.master("local[4]")
        .config("spark.jars", args.jar)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        # Keep every batch's progress, for the batch-duration percentiles.
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    results: list[dict[str, Any]] = []
    topic_4p = make_topic(4, args.records)
    topics = {4: topic_4p, 1: make_topic(1, args.records)} if "ab" in SECTIONS else {}
    for partitions, topic in topics.items():
        for consumers in (1, 2, 4):
            results.append(raw_share_consumers(topic, consumers, args.records) | {"partitions": partitions})
            share = kafka_share(spark, f"b) kafka-share P={consumers}", topic, consumers, args.records)
            results.append(share | {"partitions": partitions})
            print(json.dumps(results[-2:]), flush=True)
    for trigger in (None, "1 second") if "idle" in SECTIONS else ():
        results.append(idle_cpu(spark, topic_4p, trigger))
        print(json.dumps(results[-1]), flush=True)
    if "d" in SECTIONS:
        work_topic = make_topic(1, args.work_records)
        for variant, options in (("default", None), ("tuned", TUNED_FOR_WORK)):
            for consumers in (1, 2, 4):
                scenario = f"d) 1 ms/record {variant} P={consumers}"
                result = kafka_share(spark, scenario, work_topic, consumers, args.work_records, 1, options)
                results.append(result | {"partitions": 1, "variant": variant})
                print(json.dumps(results[-1]), flush=True)
    # The cost of each exactly-once strategy: the same drain at P=4, each with a group of its own.
    for strategy in ("none", "checkpoint-dedup", "two-phase-commit") if "strategies" in SECTIONS else ():
        options = {"kafka.share.exactly.once.strategy": strategy}
        result = kafka_share(spark, f"e) strategy {strategy} P=4", topic_4p, 4, args.records, 0, options)
        results.append(result | {"partitions": 4, "strategy": strategy})
        print(json.dumps(results[-1]), flush=True)
    spark.stop()

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "benchmarks" / "results" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "records": args.records,
        "record_size": args.record_size,
        "work_records": args.work_records,
        "sections": sorted(SECTIONS),
        "machine": f"{os.cpu_count()} cores",
        "spark": "4.3.0 local[4]",
        "kafka": "4.3.1 single node",
    }
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print_table(results)
    print(f"\nwritten to {out.relative_to(REPO)}")


def print_table(results: list[dict[str, Any]]) -> None:
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:,.0f}" if isinstance(v, float) else str(v)

    columns = [
        "scenario",
        "partitions",
        "records_per_s",
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
    raw = {
        (r["partitions"], r["scenario"][-1]): r["records_per_s"]
        for r in results
        if r["scenario"].startswith("a)")
    }
    for r in results:
        if r["scenario"].startswith("b)"):
            ratio = r["records_per_s"] / raw[(r["partitions"], str(r["parallelism"]))]
            print(f"b/a {r['partitions']} partitions, {r['parallelism']} consumers: {ratio:.2f}")
    for variant in ("default", "tuned"):
        work = {r["parallelism"]: r["records_per_s"] for r in results if r.get("variant") == variant}
        if work:
            scaling = f"P2/P1 {work[2] / work[1]:.2f}, P4/P1 {work[4] / work[1]:.2f}"
            print(f"d {variant} scaling on one partition: {scaling}")
    by_strategy = {r["strategy"]: r for r in results if "strategy" in r}
    for strategy, r in by_strategy.items():
        cost = r["records_per_s"] / by_strategy["none"]["records_per_s"]
        print(f"e {strategy}: {cost:.2f} of none's throughput, batch p50 {fmt(r['batch_ms_p50'])} ms")


if __name__ == "__main__":
    main()
