"""Reads a topic with a kafka-share query in real-time mode (Spark 4.1 and later), in a Spark
application of its own: the job of test_real_time.py.

`--sink foreach` writes each row as it gets it, through the JVM writer `example.sinks.RowFileWriter`
(integration-tests/jvm-helpers), to `<out>/rows/*.csv`: `<value>,<deliveryCount>,<latency ms>,<written
at ms>` a line.
`--sink kafka` writes each value to `--sink-topic` through Spark's own Kafka sink, with its
deliveryCount in a header of that name. The query runs until the sink has written `--until-rows`
distinct values (the foreach sink, counting what earlier runs in `<out>` wrote; the kafka sink: until the
source has ACCEPTed as many) and a batch has since reported the group's backlog at 0, then stops; its
last source metrics go to `<out>/metrics.json`.

Faults: `--fault fail` / `--fault halt` (foreach) fail the task, or end its executor's JVM, once the
writer has written `--fault-after-rows` rows; `--kill-driver-after-rows N` SIGKILLs the driver once the
foreach sink has written N rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from drain_topic import sbt_project_jars
from faults import kill_driver
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from share_metrics import source_metrics

parser = argparse.ArgumentParser()
for name in ("--bootstrap", "--topic", "--group", "--checkpoint", "--out", "--jar"):
    parser.add_argument(name, required=True)
parser.add_argument("--master", default="local[2]")
parser.add_argument("--parallelism", default="2")
parser.add_argument("--sink", choices=["foreach", "kafka"], default="foreach")
parser.add_argument("--sink-topic")
parser.add_argument("--batch-duration", default="10 seconds")
parser.add_argument("--until-rows", type=int, required=True)
parser.add_argument("--timeout-s", type=float, default=180)
parser.add_argument("--fault", choices=["none", "fail", "halt"], default="none")
parser.add_argument("--fault-after-rows", type=int, default=0)
parser.add_argument("--kill-driver-after-rows", type=int)
parser.add_argument("--lock-timeout-ms", default="15000")
parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE")


def sink_values(out: Path) -> list[str]:
    """The values the foreach sink has written, one per row."""
    return [
        line.split(",", 1)[0] for f in (out / "rows").glob("*.csv") for line in f.read_text().splitlines()
    ]


def application(args: argparse.Namespace) -> SparkSession:
    jars = [args.jar, *sbt_project_jars("jvmHelpers", "jvm-helpers-")]
    if args.sink == "kafka":
        jars += sbt_project_jars("sparkKafkaSource", "spark-sql-kafka-0-10_")
    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.jars", ",".join(jars))
        .config("spark.executor.memory", "900m")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    out = Path(args.out)
    records: DataFrame = (
        spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("kafka.share.group.id", args.group)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("kafka.share.parallelism", args.parallelism)
        .option("kafka.share.lock.timeout.ms", args.lock_timeout_ms)
        .options(**dict(option.split("=", 1) for option in args.option))
        .load()
        .selectExpr("cast(value as string) value", "deliveryCount", "timestamp")
    )
    if args.sink == "kafka":
        return (
            records.selectExpr(
                "value",
                "array(named_struct('key', 'deliveryCount', "
                "'value', cast(cast(deliveryCount as string) as binary))) headers",
            )
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", args.sink_topic)
            .option("checkpointLocation", args.checkpoint)
            .outputMode("update")
            .trigger(realTime=args.batch_duration)
            .start()
        )
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    writer = jvm.example.sinks.RowFileWriter(str(out / "rows"), args.fault, args.fault_after_rows)
    trigger = jvm.org.apache.spark.sql.streaming.Trigger.RealTime(args.batch_duration)
    jquery = (
        records._jdf.writeStream()
        .foreach(writer)
        .outputMode("update")
        .option("checkpointLocation", args.checkpoint)
        .trigger(trigger)
        .start()
    )
    return StreamingQuery(jquery)


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    out = Path(args.out)
    query = start(spark, args)
    deadline = time.monotonic() + args.timeout_s
    try:
        while query.isActive and time.monotonic() < deadline:
            metrics = source_metrics(query)
            if args.sink == "foreach":
                written = len(set(sink_values(out)))
                if args.kill_driver_after_rows and written >= args.kill_driver_after_rows:
                    kill_driver(spark, out, None)
            else:
                written = int(metrics.get("recordsAccepted", 0))
            if written >= args.until_rows and metrics.get("backlogRecords") == "0":
                break
            time.sleep(0.2)
        metrics = source_metrics(query)
        (out / "metrics.json").write_text(json.dumps(metrics))
        print(f"real-time query: {metrics}", file=sys.stderr)
    finally:
        query.stop()
    failure = query.exception()
    if failure:
        raise failure


def main(argv: list[str]) -> None:
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    run(application(args), args)


if __name__ == "__main__":
    main(sys.argv[1:])
