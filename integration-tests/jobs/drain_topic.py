"""Drains a topic with a kafka-share query in a Spark application of its own: the job of the tests that
need a fresh driver (test_driver_kill.py, test_fault_matrix.py) or executors in JVMs of their own
(test_executors.py, with --master local-cluster[...]), or a real cluster (test_standalone_cluster.py).

By default the query runs with Trigger.AvailableNow and writes each batch to `<out>/batch-<id>.json`,
idempotent per batch id in one of two ways: `--sink overwrite` replaces the file (like foreachBatch
keyed by batch id), `--sink skip` keeps an existing one (like the file sink and Delta, which skip a
batch id they already committed). `--sink upsert` and `--sink kafka` are the other sinks (sinks.py).
`--stop-once-read N` runs the query with Spark's default trigger instead, until the sink has read N
distinct values, writes whether it read them all to `<out>/read-all.txt`, waits for Spark to commit
the last batch the sink wrote, and stops.

What the tests do to the application lives by caller: faults.py (a driver killed at a stage of a
batch, failed tasks, a killed executor, a paused JVM), executor_moves.py (an executor kept busy, a
batch read again elsewhere); each flag's help says what it does.

`--kill-at` SIGKILLs the driver JVM at one stage of the first batch that holds records (whose rows
are kept in `<out>/killed.json` when the sink got to see them):
- `tasks-running`: while the batch's tasks are reading (a slow sink-side evaluation is under way);
- `sink-written`: after the sink wrote the batch, before Spark writes its commit log;
- `committed`: after the commit log, before the next batch's tasks acknowledge the records (in this
  source that is also the moment the next batch's offsets have been logged and nothing has run);
- `part-logged` (`--fault part-logged-stall`): once an after-log part past a round's first is in the
  checkpoint and its writer stalls before it ACCEPTs the part;
- `mid-stream` (`--sink kafka`): 1 s after the query reported its second batch with records, while the
  next one is being written (the id of that second batch goes to `<out>/killed-after-batch`).

A run that finishes writes its last progress's source metrics to `<out>/metrics.json`; a
Trigger.AvailableNow query that fails writes its error to `<out>/failure.txt`.

A test may run the same drain in its own Spark session (conftest.drain_in_session), where the run
needs no application of its own: `DrainRun` is the run, `main` the application around it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import executor_moves
import faults
import processes
import pyspark
import sinks
from executor_moves import evaluate_again_elsewhere, executor_pid, occupy_an_executor
from faults import (
    FAILING_STORE_SCHEME,
    RECORDS_LOG_FAULTS,
    hold_for_executor_loss,
    kill_driver,
    pause_jvm,
    records_log_fault,
    slowly,
    with_fault,
)
from processes import first_time
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from share_metrics import acknowledged, source_metrics
from sinks import run_into_kafka, upsert
from spark_kafka_share import AcknowledgeType, acknowledge, marks

# The UDFs and tasks of these modules travel to the executors by value: their Python workers do not
# have this directory on their path.
for module in (processes, faults, executor_moves, sinks):
    cloudpickle.register_pickle_by_value(module)

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
parser.add_argument(
    "--kill-at", choices=["tasks-running", "sink-written", "committed", "mid-stream", "part-logged"]
)
parser.add_argument(
    "--kill-once-exists",
    metavar="PATH",
    help="at the --kill-at stage, write <out>/kill-pending, then wait until PATH exists before the kill",
)
parser.add_argument(
    "--fault",
    choices=["task-failure", "executor-kill", *RECORDS_LOG_FAULTS],
    help="in the first batch with records: task-failure fails task attempts (run with a master that retries "
    "tasks, such as local[2,2]); executor-kill SIGKILLs the executor JVM of one of its tasks "
    "(local-cluster[...]); part-write-failure fails the checkpoint's first write of an after-log part past a "
    "round's first, so its task fails between the part's poll and its write; part-logged-stall stalls that "
    "part's writer once the part is in place, before its ACCEPT (faults.records_log_fault)",
)
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
    "--hold-batch",
    type=int,
    metavar="N",
    help="the Nth batch with records, once written, stays in the sink until <out>/hold-released exists, with "
    "the pids of the executors whose consumers read it in <out>/held-by (faults.hold_for_executor_loss)",
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
    help="from the first batch with records (with --max-records-per-trigger, the first that read that many, "
    "so that every consumer holds records), a job of its own keeps the only core of an executor whose "
    "consumers read records of that batch busy this long (run with local-cluster[N,1,...]): the slots there "
    "move to the other executors. It writes <out>/occupied-executor, and <out>/occupy-ended once its time "
    "runs out",
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
# The flags that act on the application itself (its JVMs, master, confs or jars): a run in another
# application's session (conftest.drain_in_session) cannot take them.
APPLICATION_FLAGS = (
    "--master",
    "--spark-conf",
    "--sbt-jars",
    "--kill-at",
    "--fault",
    "--pause-jvm-s",
    "--occupy-executor-s",
    "--evaluate-again-elsewhere",
    "--stop-while-occupied",
    "--hold-batch",
)


def sbt_project_jars(project: str, jar_prefix: str) -> list[str]:
    """The jars of an sbt project of this build that pyspark does not ship."""
    sbt_classpath = Path(__file__).resolve().parents[2] / "dev" / "sbt-classpath"
    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    command = [str(sbt_classpath), project, jar_prefix, str(pyspark_jars)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().split(",")


def application(args: argparse.Namespace) -> SparkSession:
    extra_jars = [jar for spec in args.sbt_jars for jar in sbt_project_jars(*spec.split("=", 1))]
    if args.sink == "kafka":  # Spark's own kafka source (and sink)
        extra_jars += sbt_project_jars("sparkKafkaSource", "spark-sql-kafka-0-10_")
    confs = dict(conf.split("=", 1) for conf in args.spark_conf)
    if args.fault in RECORDS_LOG_FAULTS:
        extra_jars += sbt_project_jars("jvmHelpers", "jvm-helpers-")
        confs.update(records_log_fault(Path(args.out), args.fault))
    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.jars", ",".join([args.jar, *extra_jars]))
        .config("spark.executor.memory", "900m")
        .config("spark.ui.enabled", "false")
        .config(map=confs)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class DrainRun:
    """One run of the drain query in `spark`, as `args` say; what the sink read stays here."""

    def __init__(self, spark: SparkSession, args: argparse.Namespace) -> None:
        self.spark = spark
        self.args = args
        self.out = Path(args.out)
        self.read_values: set[str] = set()
        self.written_batches: list[int] = []  # ids of the batches the sink wrote, in order
        self.batches_with_rows: list[int] = []
        # A batch in which every consumer read its share of --max-records-per-trigger: all slots hold records.
        self.full_batch = int(args.max_records_per_trigger or 1)

    def kill(self) -> None:
        kill_driver(self.spark, self.out, self.args.kill_once_exists)

    def sink(self, batch: DataFrame, batch_id: int) -> None:
        args, out = self.args, self.out
        if args.kill_at == "committed" and (out / "killed.json").exists():
            self.kill()
        if args.kill_at == "tasks-running" and not (out / "killed.json").exists():
            # The first evaluation runs the batch's tasks slowly (10 ms a record); a batch with records
            # is still being read when the timer fires, an empty one finishes first and cancels it.
            timer = threading.Timer(1.0, self.kill)
            timer.start()
            batch.select(slowly(F.col("value").cast("string"))).collect()
            timer.cancel()
        if args.fault in ("task-failure", "executor-kill"):
            failing = with_fault(out, args.fault, args.task_failures)
            batch.select(failing(F.col("value").cast("string"))).collect()
        if args.pause_jvm_s and batch.count() > 0 and first_time(out, "jvm-paused"):
            pause_jvm(self.spark, args.pause_jvm_s)
        if args.sink == "upsert":
            rows = upsert(batch, Path(args.sink_db or out / "sink.db"), out)
            self.kill_once_written(rows)
            return
        if args.release_every:
            first = batch.filter("deliveryCount = 1").withColumn(
                "n", F.expr("cast(split(cast(value as string), '-')[1] as int)")
            )
            released = first.filter(F.col("n") % args.release_every == 0)
            acknowledge(batch, marks(released, AcknowledgeType.RELEASE))
        target = out / f"batch-{batch_id}.json"
        if args.sink == "skip" and target.exists():
            return
        columns = ["cast(value as string) value", "deliveryCount"]
        if args.occupy_executor_s or args.hold_batch:  # which executors' consumers read the batch
            read = batch.selectExpr(*columns).withColumn("pid", executor_pid()).collect()
            readers = sorted({r.pid for r in read})
        else:
            read, readers = batch.selectExpr(*columns).collect(), []
        rows = [[r.value, r.deliveryCount] for r in read]
        if args.evaluate_again_elsewhere and rows and first_time(out, "evaluated-again"):
            evaluate_again_elsewhere(self.spark, out, batch, [value for value, _ in rows])
        if args.slow_batch_s and rows and first_time(out, "slow-batch"):
            time.sleep(args.slow_batch_s)
        target.write_text(json.dumps(rows))
        self.read_values.update(value for value, _ in rows)
        self.written_batches.append(batch_id)
        if rows:
            self.batches_with_rows.append(batch_id)
        if len(self.batches_with_rows) == args.hold_batch and first_time(out, "held"):
            hold_for_executor_loss(out, readers)
        # After the batch's last evaluation, so that what the consumers there hold is what the sink wrote.
        if args.occupy_executor_s and len(rows) >= self.full_batch and first_time(out, "occupy-started"):
            occupy_an_executor(self.spark, out, args.occupy_executor_s, executor=readers[0])
        self.kill_once_written(rows)

    def kill_once_part_logged(self) -> None:
        """--kill-at part-logged: kills the driver once the checkpoint's store stalls a part's writer."""
        while not (self.out / "part-logged-stall-injected").exists():
            time.sleep(0.05)
        self.kill()

    def kill_once_written(self, rows: list[list[object]]) -> None:
        """--kill-at sink-written kills the driver once the sink wrote the first batch with records;
        `committed`, at the next batch (its commit log then written). Both keep that batch's rows."""
        killed = self.out / "killed.json"
        if self.args.kill_at in ("sink-written", "committed") and rows and not killed.exists():
            killed.write_text(json.dumps(rows))
            if self.args.kill_at == "sink-written":
                self.kill()

    def share_records(self) -> DataFrame:
        args = self.args
        options = dict(option.split("=", 1) for option in args.option)
        if args.max_records_per_trigger:
            options = {"maxRecordsPerTrigger": args.max_records_per_trigger, **options}
        return (
            self.spark.readStream.format("kafka-share")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("kafka.share.group.id", args.group)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .option("kafka.share.parallelism", args.parallelism)
            # Short locks, so the records a killed driver held come back within seconds.
            .option("kafka.share.lock.timeout.ms", args.lock_timeout_ms)
            .option("kafka.share.exactly.once.strategy", args.strategy)
            .option("kafka.share.acknowledgment.mode", "explicit" if args.release_every else "implicit")
            .options(**options)
            .load()
        )

    def run(self, timeout_s: float | None = None) -> None:
        """Runs the query to its end; a Trigger.AvailableNow query that fails, or outlasts `timeout_s`,
        raises (a failure's error written to <out>/failure.txt first)."""
        args, out = self.args, self.out
        if args.kill_at == "part-logged":
            threading.Thread(target=self.kill_once_part_logged, daemon=True).start()
        share_records = self.share_records()
        writer = share_records.writeStream.foreachBatch(self.sink)
        checkpoint = args.checkpoint
        if args.fault in RECORDS_LOG_FAULTS:  # the same directory, through the faulty store
            checkpoint = f"{FAILING_STORE_SCHEME}://{Path(checkpoint).resolve()}"
        writer = writer.option("checkpointLocation", checkpoint)
        if args.sink == "kafka":
            query = run_into_kafka(
                share_records,
                args.bootstrap,
                args.sink_topic,
                args.checkpoint,
                out,
                args.async_progress,
                self.kill if args.kill_at == "mid-stream" else None,
            )
        elif args.stop_once_read:
            query = writer.start()
            self.stop_once_read(query)
        else:
            query = writer.trigger(availableNow=True).start()
            try:
                ended = query.awaitTermination(timeout_s)
            except StreamingQueryException as failure:
                (out / "failure.txt").write_text(str(failure))
                raise
            if ended is False:
                query.stop()
                raise TimeoutError(f"the drain did not end within {timeout_s} s")
        self.report(query)

    def stop_once_read(self, query: StreamingQuery) -> None:
        args, out = self.args, self.out
        metric, _, metric_target = (args.until_metric or "").partition("=")
        started = time.monotonic()

        def finished() -> bool:
            metrics = source_metrics(query)
            return (
                len(self.read_values) >= args.stop_once_read
                and (not args.until_acknowledged or acknowledged(metrics) >= args.stop_once_read)
                and (not args.until_metric or int(metrics.get(metric, 0)) >= int(metric_target))
            )

        while not finished() and query.isActive:
            if time.monotonic() - started > (args.occupy_executor_s or 120):
                break
            time.sleep(0.2)
        (out / "read-all.txt").write_text(str(len(self.read_values) >= args.stop_once_read))
        # The sink has the records before Spark commits their batch: a stop in between leaves that batch
        # uncommitted, and the source rightly gives its records back to the group. Its progress is
        # reported once the batch is committed.
        deadline = time.monotonic() + 60
        while query.isActive and self.written_batches and time.monotonic() < deadline:
            progress = query.lastProgress
            if progress and progress["batchId"] >= self.written_batches[-1]:
                break
            time.sleep(0.2)
        if args.stop_while_occupied:
            occupy_an_executor(self.spark, out, args.stop_while_occupied)
        else:
            # Frees the executor before the query stops.
            self.spark.sparkContext.cancelJobGroup("occupy-executor")
        query.stop()
        if args.stop_while_occupied:
            (out / "stopped").write_text("")
            deadline = time.monotonic() + args.stop_while_occupied
            while not (out / "done").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            self.spark.sparkContext.cancelJobGroup("occupy-executor")

    def report(self, query: StreamingQuery) -> None:
        # On stderr, which a failing test shows: what each batch read and how the source settled records.
        for progress in query.recentProgress:
            source = progress["sources"][0]
            read = f"{source['numInputRows']} rows, {source['metrics']}"
            print(f"batch {progress['batchId']}: {read}", file=sys.stderr)
        # The run's counters so far: the source metrics are totals since the query started.
        if query.lastProgress:
            (self.out / "metrics.json").write_text(json.dumps(source_metrics(query)))
        jsc = self.spark.sparkContext._jsc
        assert jsc is not None
        (self.out / "executors.txt").write_text(str(jsc.sc().getExecutorMemoryStatus().size() - 1))


def main(argv: list[str]) -> None:
    args = parser.parse_args(argv)
    DrainRun(application(args), args).run()


if __name__ == "__main__":
    main(sys.argv[1:])
