"""Drains a topic with a kafka-share query (Trigger.AvailableNow) in a Spark application of its own.

The sink writes each batch to `<out>/batch-<id>.json` (idempotent per batch id). With --kill, the
driver JVM is SIGKILLed right after the first non-empty batch is written and before Spark can commit
it; its rows are also kept in `<out>/killed.json`.

Used by tests that need a fresh driver (test_driver_kill.py) or executors in JVMs of their own
(test_executors.py, with --master local-cluster[...]).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

parser = argparse.ArgumentParser()
for name in ("--bootstrap", "--topic", "--group", "--checkpoint", "--out", "--jar"):
    parser.add_argument(name, required=True)
parser.add_argument("--master", default="local[2]")
parser.add_argument("--parallelism", default="2")
parser.add_argument("--lock-timeout-ms", default="15000")
parser.add_argument("--kill", action="store_true")
args = parser.parse_args()
out = Path(args.out)

spark = (
    SparkSession.builder.master(args.master)
    .config("spark.jars", args.jar)
    .config("spark.executor.memory", "900m")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def sink(batch: DataFrame, batch_id: int) -> None:
    columns = ["cast(value as string) value", "deliveryCount"]
    rows = [[r.value, r.deliveryCount] for r in batch.selectExpr(*columns).collect()]
    (out / f"batch-{batch_id}.json").write_text(json.dumps(rows))
    if args.kill and rows:
        (out / "killed.json").write_text(json.dumps(rows))
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        os.kill(jvm.java.lang.ProcessHandle.current().pid(), signal.SIGKILL)
        os._exit(137)


query = (
    spark.readStream.format("kafka-share")
    .option("kafka.bootstrap.servers", args.bootstrap)
    .option("kafka.share.group.id", args.group)
    .option("subscribe", args.topic)
    .option("startingOffsets", "earliest")
    .option("kafka.share.parallelism", args.parallelism)
    # Short locks, so the records a killed driver held come back within seconds.
    .option("kafka.share.lock.timeout.ms", args.lock_timeout_ms)
    .load()
    .writeStream.foreachBatch(sink)
    .option("checkpointLocation", args.checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
jsc = spark.sparkContext._jsc
assert jsc is not None
(out / "executors.txt").write_text(str(jsc.sc().getExecutorMemoryStatus().size() - 1))
