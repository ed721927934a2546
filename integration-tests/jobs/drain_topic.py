"""Drains a topic with a kafka-share query (Trigger.AvailableNow) in a Spark application of its own.

The sink writes each batch to `<out>/batch-<id>.json`, idempotent per batch id in one of two ways:
`--sink overwrite` replaces the file (like foreachBatch keyed by batch id), `--sink skip` keeps an
existing one (like the file sink and Delta, which skip a batch id they already committed). `--sink
upsert` is the `idempotent` strategy's JDBC recipe instead: rows upserted into SQLite
(`--sink-db`, `<out>/sink.db` by default; queries may share one) keyed by (topic, partition, offset),
with every delivery also appended to `<out>/deliveries.json` lines so the test can count what reached
the sink. `--sink kafka` is Spark's Kafka sink (the jars of Spark's own kafka source, resolved by
dev/sbt-classpath), writing each record's value to `--sink-topic` with its deliveryCount in a header
of that name, 10 ms a record (a Python UDF on the way): the query then runs with the default trigger
until `<out>/done` appears (at most 180 s), with `--async-progress` under Spark's async progress tracking
(offset and commit logs written in the background, here only the first batch's: a 10-minute interval).

`--fault task-failure` fails one task attempt of the first batch with records (run with a master that
retries tasks, such as local[2,2]), or `--task-failures N` of them, counted across runs sharing `--out`;
`--fault executor-kill` SIGKILLs the executor JVM running one of its tasks (run with local-cluster[...]).

`--evaluate-again-elsewhere` reads the first batch with records a second time (as a foreachBatch
with two actions would) while the executor that read it is busy, so that Spark runs the read on
another executor; the sink writes the first read.

`--slow-batch-s` makes the first batch with records outlive the acquisition lock (given with
`--lock-timeout-ms`); `--pause-jvm-s` stops the JVM between two reads of that batch, so that the
locks expire unrenewed.

`--occupy-executor-s` starts, at the first batch with records (with `--max-records-per-trigger`, the
first that read that many, so that every consumer holds records), a job that keeps one executor's only
core busy this long (run with local-cluster[N,1,...]): the query's slots there move to the other
executors, and their consumers stay behind on a live executor that no task of the query comes back
to. It comes with `--stop-once-read N`: the query then runs with the default trigger until the sink
has read N distinct values (or the occupying job ends), writes whether it read them all to
`<out>/read-all.txt`, waits for Spark to commit the last batch the sink wrote, and stops; with
`--until-acknowledged` it also runs until Kafka has applied acknowledgements for N records, with
`--until-metric NAME=N` until the source's metric NAME is N or more. The
occupying task writes `<out>/occupy-ended` if its time runs out. `--stop-while-occupied S` (with
`--stop-once-read`) instead starts, once the last batch is committed, a job that keeps one executor
busy for S seconds, stops the query while it is, writes `<out>/stopped` and keeps the application up
until `<out>/done` appears (or S seconds pass).

A run that finishes writes its last progress's source metrics to `<out>/metrics.json`; a
Trigger.AvailableNow query that fails writes its error to `<out>/failure.txt`.

`--kill-at` SIGKILLs the driver JVM at one stage of the first batch that holds records (whose rows
are kept in `<out>/killed.json` when the sink got to see them):
- `tasks-running`: while the batch's tasks are reading (a slow sink-side evaluation is under way);
- `sink-written`: after the sink wrote the batch, before Spark writes its commit log;
- `committed`: after the commit log, before the next batch's tasks acknowledge the records (in this
  source that is also the moment the next batch's offsets have been logged and nothing has run);
- `mid-stream` (`--sink kafka`): 1 s after the query reported its second batch with records, while the
  next one is being written (the id of that second batch goes to `<out>/killed-after-batch`).

Used by tests that need a fresh driver (test_driver_kill.py) or executors in JVMs of their own
(test_executors.py, with --master local-cluster[...]).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyspark
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from share_metrics import acknowledged, source_metrics
from spark_kafka_share import AcknowledgeType, acknowledge, marks

parser = argparse.ArgumentParser()
for name in ("--bootstrap", "--topic", "--group", "--checkpoint", "--out", "--jar"):
    parser.add_argument(name, required=True)
parser.add_argument("--master", default="local[2]")
parser.add_argument("--parallelism", default="2")
parser.add_argument("--lock-timeout-ms", default="15000")
parser.add_argument("--strategy", default="none")
parser.add_argument("--sink", choices=["overwrite", "skip", "upsert", "kafka"], default="overwrite")
parser.add_argument("--sink-topic", help="--sink kafka: the topic it writes to")
parser.add_argument("--async-progress", action="store_true", help="--sink kafka: async progress tracking")
parser.add_argument("--sink-db", help="--sink upsert: the SQLite file (default <out>/sink.db)")
parser.add_argument("--kill-at", choices=["tasks-running", "sink-written", "committed", "mid-stream"])
parser.add_argument(
    "--kill-once-exists",
    metavar="PATH",
    help="at the --kill-at stage, write <out>/kill-pending, then wait until PATH exists before the kill",
)
parser.add_argument("--fault", choices=["task-failure", "executor-kill"])
parser.add_argument(
    "--task-failures",
    type=int,
    default=1,
    help="with --fault task-failure: how many task attempts fail, the first ones with records, counted "
    "across runs that share --out",
)
parser.add_argument("--max-records-per-trigger")
parser.add_argument(
    "--slow-batch-s",
    type=float,
    help="the first batch with records holds them this long in the sink before writing them",
)
parser.add_argument(
    "--pause-jvm-s",
    type=float,
    help="the first batch with records is read once, then the JVM is stopped (SIGSTOP) this long, then the "
    "batch is read again for the sink: its records' locks expire meanwhile, so their renewal is refused",
)
parser.add_argument(
    "--option", action="append", default=[], metavar="NAME=VALUE", help="another kafka-share source option"
)
parser.add_argument(
    "--spark-conf", action="append", default=[], metavar="NAME=VALUE", help="a Spark conf of the application"
)
parser.add_argument(
    "--sbt-jars",
    action="append",
    default=[],
    metavar="PROJECT=PREFIX",
    help="the jars of an sbt project of this build (dev/sbt-classpath PROJECT PREFIX) that pyspark lacks, "
    "added to spark.jars",
)
parser.add_argument(
    "--release-every",
    type=int,
    help="explicit mode: RELEASE the first delivery of every record whose value ends in a multiple of N",
)
parser.add_argument(
    "--occupy-executor-s",
    type=float,
    help="from the first batch with records, a job of its own keeps the only core of an executor whose "
    "consumers read records of that batch busy this long",
)
parser.add_argument(
    "--evaluate-again-elsewhere",
    action="store_true",
    help="the first batch with records is read again while the executor that read it is kept busy (run "
    "with local-cluster[N,1,...] and --parallelism 1); the sink writes only the first read",
)
parser.add_argument(
    "--stop-once-read",
    type=int,
    metavar="N",
    help="run with the default trigger until the sink has read N distinct values (or --occupy-executor-s, "
    "else 120 s, passed)",
)
parser.add_argument(
    "--until-acknowledged",
    action="store_true",
    help="with --stop-once-read: also run until Kafka applied acknowledgements for N records (an ACCEPT it "
    "fails, in a rebalance, leaves its record to come back after its lock and be read again)",
)
parser.add_argument(
    "--until-metric",
    metavar="NAME=N",
    help="with --stop-once-read: also run until the source's metric NAME in the last progress is N or more",
)
parser.add_argument(
    "--stop-while-occupied",
    type=float,
    metavar="S",
    help="with --stop-once-read: once the sink has read everything, keep one executor busy for S s, stop the "
    "query meanwhile, then keep the application up until <out>/done appears",
)
args = parser.parse_args()
out = Path(args.out)
read_values: set[str] = set()
written_batches: list[int] = []  # ids of the batches the sink wrote, in order
# A batch in which every consumer read its share of --max-records-per-trigger: all slots hold records.
full_batch = int(args.max_records_per_trigger or 1)


def sbt_project_jars(project: str, jar_prefix: str) -> list[str]:
    """The jars of an sbt project of this build that pyspark does not ship."""
    sbt_classpath = Path(__file__).resolve().parents[2] / "dev" / "sbt-classpath"
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    command = [str(sbt_classpath), project, jar_prefix, str(pyspark_jars)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().split(",")


extra_jars = [jar for spec in args.sbt_jars for jar in sbt_project_jars(*spec.split("=", 1))]
if args.sink == "kafka":  # Spark's own kafka source (and sink)
    extra_jars += sbt_project_jars("sparkKafkaSource", "spark-sql-kafka-0-10_")


spark = (
    SparkSession.builder.master(args.master)
    .config("spark.jars", ",".join([args.jar, *extra_jars]))
    .config("spark.executor.memory", "900m")
    .config("spark.ui.enabled", "false")
    .config(map=dict(conf.split("=", 1) for conf in args.spark_conf))
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def driver_jvm_pid() -> int:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return int(jvm.java.lang.ProcessHandle.current().pid())


def kill_driver() -> None:
    if args.kill_once_exists:  # another query is to be running when this one dies
        (out / "kill-pending").touch()
        deadline = time.monotonic() + 300
        while not Path(args.kill_once_exists).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    os.kill(driver_jvm_pid(), signal.SIGKILL)
    os._exit(137)


def pause_jvm(seconds: float) -> None:
    pid = driver_jvm_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


@F.udf("string")
def slowly(value: str) -> str:
    time.sleep(0.01)
    return value


def first_time(marker: str) -> bool:
    """True for exactly one caller across the application's processes."""
    try:
        os.close(os.open(out / marker, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def executor_jvm_pid() -> int:
    """The JVM above this Python worker (worker <- pyspark daemon <- executor JVM)."""
    pid = os.getpid()
    while pid > 1:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no JVM above this Python worker")


@F.udf("string")
def with_fault(value: str) -> str:
    if args.fault == "task-failure" and any(
        first_time("task-failure-injected" + (f"-{n}" if n else "")) for n in range(args.task_failures)
    ):
        raise RuntimeError("injected task failure")
    if args.fault == "executor-kill" and first_time("executor-kill-injected"):
        os.kill(executor_jvm_pid(), signal.SIGKILL)
    return value


def occupy(executor: int | None, seconds: float) -> Callable[[int], None]:
    """A task that keeps its executor's core busy if it is the first to get here (on `executor`, the
    JVM with that pid, when given); the others end at once."""

    def task(_: int) -> None:
        if executor in (None, executor_jvm_pid()) and first_time("occupied-executor"):
            (out / "occupied-executor").write_text(str(executor_jvm_pid()))
            time.sleep(seconds)
            (out / "occupy-ended").write_text("")

    return task


def occupy_an_executor(executor: int | None = None, seconds: float = 0) -> None:
    """Starts the occupying job (all cores free: its tasks spread over the executors, and it runs again
    until one is on `executor`), and returns once it runs."""
    sc = spark.sparkContext

    def run() -> None:
        sc.setJobGroup("occupy-executor", "keeps one executor busy", interruptOnCancel=True)
        with contextlib.suppress(Exception):  # cancelled when the query stops
            while not (out / "occupied-executor").exists():
                sc.parallelize(range(4), 4).foreach(occupy(executor, seconds or args.occupy_executor_s))

    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not (out / "occupied-executor").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the occupying job did not start within 60 s")
        time.sleep(0.1)


@F.udf("int")
def executor_pid() -> int:
    return executor_jvm_pid()


def evaluate_again_elsewhere(batch: DataFrame, first_read: list[str]) -> None:
    """Reads `batch` again while the executor whose consumer read it is busy: after its locality wait
    Spark runs the slot's task on another executor. Writes both reads' executors and values to
    `<out>/second-evaluation.json`."""
    (first_executor,) = {r.pid for r in batch.select(executor_pid().alias("pid")).distinct().collect()}
    occupy_an_executor(first_executor, seconds=120)
    second = batch.select(F.col("value").cast("string").alias("v"), executor_pid().alias("pid")).collect()
    spark.sparkContext.cancelJobGroup("occupy-executor")
    evaluations = {
        "first": {"executors": [first_executor], "values": first_read},
        "second": {"executors": sorted({r.pid for r in second}), "values": [r.v for r in second]},
    }
    (out / "second-evaluation.json").write_text(json.dumps(evaluations))


def upsert(batch: DataFrame) -> None:
    rows = batch.selectExpr(
        "topic", "partition", "offset", "cast(value as string) v", "deliveryCount"
    ).collect()
    # Another query's job may be writing the same file: wait for its lock rather than fail.
    with sqlite3.connect(args.sink_db or out / "sink.db", timeout=60) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS records (topic TEXT, partition INT, offset INT, value TEXT, "
            "delivery_count INT, PRIMARY KEY (topic, partition, offset))"
        )
        db.executemany(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?) ON CONFLICT (topic, partition, offset) "
            "DO UPDATE SET value = excluded.value, delivery_count = excluded.delivery_count",
            [(r.topic, r.partition, r.offset, r.v, r.deliveryCount) for r in rows],
        )
    with open(out / "deliveries.json", "a") as deliveries:
        deliveries.writelines(json.dumps([r.v, r.deliveryCount]) + "\n" for r in rows)
    if args.kill_at in ("sink-written", "committed") and rows and not (out / "killed.json").exists():
        (out / "killed.json").write_text(json.dumps([[r.v, r.deliveryCount] for r in rows]))
        if args.kill_at == "sink-written":
            kill_driver()


def sink(batch: DataFrame, batch_id: int) -> None:
    if args.kill_at == "committed" and (out / "killed.json").exists():
        kill_driver()
    if args.kill_at == "tasks-running" and not (out / "killed.json").exists():
        # The first evaluation runs the batch's tasks slowly (10 ms a record); a batch with records
        # is still being read when the timer fires, an empty one finishes first and cancels it.
        timer = threading.Timer(1.0, kill_driver)
        timer.start()
        batch.select(slowly(F.col("value").cast("string"))).collect()
        timer.cancel()
    if args.fault:
        batch.select(with_fault(F.col("value").cast("string"))).collect()
    if args.pause_jvm_s and batch.count() > 0 and first_time("jvm-paused"):
        pause_jvm(args.pause_jvm_s)
    if args.sink == "upsert":
        upsert(batch)
        return
    if args.release_every:
        first = batch.filter("deliveryCount = 1").withColumn(
            "n", F.expr("cast(split(cast(value as string), '-')[1] as int)")
        )
        acknowledge(batch, marks(first.filter(F.col("n") % args.release_every == 0), AcknowledgeType.RELEASE))
    target = out / f"batch-{batch_id}.json"
    if args.sink == "skip" and target.exists():
        return
    columns = ["cast(value as string) value", "deliveryCount"]
    if args.occupy_executor_s:  # which executors' consumers read the batch: one of them is to be kept busy
        read = batch.selectExpr(*columns).withColumn("pid", executor_pid()).collect()
        readers = sorted({r.pid for r in read})
    else:
        read, readers = batch.selectExpr(*columns).collect(), []
    rows = [[r.value, r.deliveryCount] for r in read]
    if args.evaluate_again_elsewhere and rows and first_time("evaluated-again"):
        evaluate_again_elsewhere(batch, [value for value, _ in rows])
    if args.slow_batch_s and rows and first_time("slow-batch"):
        time.sleep(args.slow_batch_s)
    target.write_text(json.dumps(rows))
    read_values.update(value for value, _ in rows)
    written_batches.append(batch_id)
    # After the batch's last evaluation, so that what the consumers there hold is what the sink wrote.
    if args.occupy_executor_s and len(rows) >= full_batch and first_time("occupy-started"):
        occupy_an_executor(readers[0])
    if args.kill_at in ("sink-written", "committed") and rows and not (out / "killed.json").exists():
        (out / "killed.json").write_text(json.dumps(rows))
        if args.kill_at == "sink-written":
            kill_driver()


def run_into_kafka(records: DataFrame) -> StreamingQuery:
    """--sink kafka: runs the query until `<out>/done` appears (180 s at most), or kills the driver
    mid-stream."""
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
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.sink_topic)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.async_progress:
        writer = writer.option("asyncProgressTrackingEnabled", "true").option(
            "asyncProgressTrackingCheckpointIntervalMs", "600000"
        )
    query = writer.start()
    deadline = time.monotonic() + 180
    while query.isActive and not (out / "done").exists() and time.monotonic() < deadline:
        read = [progress["batchId"] for progress in query.recentProgress if progress["numInputRows"] > 0]
        if args.kill_at == "mid-stream" and len(read) >= 2:
            (out / "killed-after-batch").write_text(str(read[-1]))
            time.sleep(1)
            kill_driver()
        time.sleep(0.2)
    query.stop()
    failure = query.exception()
    if failure:
        raise failure
    return query


share_records = (
    spark.readStream.format("kafka-share")
    .option("kafka.bootstrap.servers", args.bootstrap)
    .option("kafka.share.group.id", args.group)
    .option("subscribe", args.topic)
    .option("startingOffsets", "earliest")
    .option("kafka.share.parallelism", args.parallelism)
    # Short locks, so the records a killed driver held come back within seconds.
    .option("kafka.share.lock.timeout.ms", args.lock_timeout_ms)
    .option("kafka.share.exactly.once.strategy", args.strategy)
    .option("kafka.share.acknowledgment.mode", "explicit" if args.release_every else "implicit")
    .options(
        **({"maxRecordsPerTrigger": args.max_records_per_trigger} if args.max_records_per_trigger else {})
    )
    .options(**dict(option.split("=", 1) for option in args.option))
    .load()
)
writer = share_records.writeStream.foreachBatch(sink).option("checkpointLocation", args.checkpoint)
if args.sink == "kafka":
    query = run_into_kafka(share_records)
elif args.stop_once_read:
    metric, _, metric_target = (args.until_metric or "").partition("=")
    query = writer.start()
    started = time.monotonic()

    def finished() -> bool:
        metrics = source_metrics(query)
        return (
            len(read_values) >= args.stop_once_read
            and (not args.until_acknowledged or acknowledged(metrics) >= args.stop_once_read)
            and (not args.until_metric or int(metrics.get(metric, 0)) >= int(metric_target))
        )

    while not finished() and query.isActive:
        if time.monotonic() - started > (args.occupy_executor_s or 120):
            break
        time.sleep(0.2)
    (out / "read-all.txt").write_text(str(len(read_values) >= args.stop_once_read))
    # The sink has the records before Spark commits their batch: a stop in between leaves that batch
    # uncommitted, and the source rightly gives its records back to the group. Its progress is
    # reported once the batch is committed.
    deadline = time.monotonic() + 60
    while query.isActive and written_batches and time.monotonic() < deadline:
        progress = query.lastProgress
        if progress and progress["batchId"] >= written_batches[-1]:
            break
        time.sleep(0.2)
    if args.stop_while_occupied:
        occupy_an_executor(seconds=args.stop_while_occupied)
    else:
        spark.sparkContext.cancelJobGroup("occupy-executor")  # frees the executor before the query stops
    query.stop()
    if args.stop_while_occupied:
        (out / "stopped").write_text("")
        deadline = time.monotonic() + args.stop_while_occupied
        while not (out / "done").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        spark.sparkContext.cancelJobGroup("occupy-executor")
else:
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    except StreamingQueryException as failure:
        (out / "failure.txt").write_text(str(failure))
        raise
# On stderr, which a failing test shows: what each batch read and how the source settled records.
for progress in query.recentProgress:
    source = progress["sources"][0]
    print(f"batch {progress['batchId']}: {source['numInputRows']} rows, {source['metrics']}", file=sys.stderr)
if query.lastProgress:  # the run's counters so far: the source metrics are totals since the query started
    (out / "metrics.json").write_text(json.dumps(source_metrics(query)))
jsc = spark.sparkContext._jsc
assert jsc is not None
(out / "executors.txt").write_text(str(jsc.sc().getExecutorMemoryStatus().size() - 1))
