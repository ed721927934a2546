"""What test_executors.py does to a drain application's executors: keep one of them busy, so that the
query's slots move to the others and their consumers stay behind on a live executor, and read a batch
again while the executor that read it is busy, so that Spark runs the read elsewhere."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from processes import executor_jvm_pid, first_time
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType


@F.udf(IntegerType())  # a type, not a DDL string: no session exists at import
def executor_pid() -> int:
    return executor_jvm_pid()


def occupy(out: Path, executor: int | None, seconds: float) -> Callable[[int], None]:
    """A task that keeps its executor's core busy if it is the first to get here (on `executor`, the
    JVM with that pid, when given); the others end at once."""

    def task(_: int) -> None:
        if executor in (None, executor_jvm_pid()) and first_time(out, "occupied-executor"):
            (out / "occupied-executor").write_text(str(executor_jvm_pid()))
            time.sleep(seconds)
            (out / "occupy-ended").write_text("")

    return task


def occupy_an_executor(spark: SparkSession, out: Path, seconds: float, executor: int | None = None) -> None:
    """Starts the occupying job (job group `occupy-executor`; all cores free: its tasks spread over the
    executors, and it runs again until one is on `executor`), and returns once it runs."""
    sc = spark.sparkContext

    def run() -> None:
        sc.setJobGroup("occupy-executor", "keeps one executor busy", interruptOnCancel=True)
        with contextlib.suppress(Exception):  # cancelled when the query stops
            while not (out / "occupied-executor").exists():
                sc.parallelize(range(4), 4).foreach(occupy(out, executor, seconds))

    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not (out / "occupied-executor").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the occupying job did not start within 60 s")
        time.sleep(0.1)


def evaluate_again_elsewhere(spark: SparkSession, out: Path, batch: DataFrame, first_read: list[str]) -> None:
    """Reads `batch` again while the executor whose consumer read it is busy: after its locality wait
    Spark runs the slot's task on another executor. Writes both reads' executors and values to
    `<out>/second-evaluation.json`."""
    (first_executor,) = {r.pid for r in batch.select(executor_pid().alias("pid")).distinct().collect()}
    occupy_an_executor(spark, out, seconds=120, executor=first_executor)
    second = batch.select(F.col("value").cast("string").alias("v"), executor_pid().alias("pid")).collect()
    spark.sparkContext.cancelJobGroup("occupy-executor")
    evaluations = {
        "first": {"executors": [first_executor], "values": first_read},
        "second": {"executors": sorted({r.pid for r in second}), "values": [r.v for r in second]},
    }
    (out / "second-evaluation.json").write_text(json.dumps(evaluations))
