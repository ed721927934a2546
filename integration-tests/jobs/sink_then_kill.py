"""A kafka-share query whose sink writes each batch to `<out>/batch-<id>.json` (idempotent per batch
id). With --kill, the driver JVM is SIGKILLed right after the first non-empty batch is written and
before Spark can commit it; its rows are also kept in `<out>/killed.json`.

Run by test_driver_kill.py in a process of its own, twice on one checkpoint.
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
parser.add_argument("--kill", action="store_true")
args = parser.parse_args()
out = Path(args.out)

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.jars", args.jar)
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def sink(batch: DataFrame, batch_id: int) -> None:
    rows = [[r.value, r.deliveryCount] for r in batch.selectExpr("cast(value as string) value", "deliveryCount").collect()]
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
    .option("kafka.share.parallelism", "2")
    # Short locks, so the records the killed driver held come back within seconds.
    .option("kafka.share.lock.timeout.ms", "5000")
    .load()
    .writeStream.foreachBatch(sink)
    .option("checkpointLocation", args.checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
