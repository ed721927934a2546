"""The processes of a drain application (jobs/drain_topic.py), for the faults its tests inject: the JVM
of the driver or of a Python worker's executor, and markers that one caller across the application's
processes gets."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession


def first_time(out: Path, marker: str) -> bool:
    """True for exactly one caller across the application's processes (`<out>/<marker>` records it)."""
    try:
        os.close(os.open(out / marker, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def driver_jvm_pid(spark: SparkSession) -> int:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return int(jvm.java.lang.ProcessHandle.current().pid())


def executor_jvm_pid() -> int:
    """The JVM above this Python worker (worker <- pyspark daemon <- executor JVM)."""
    pid = os.getpid()
    while pid > 1:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no JVM above this Python worker")
