"""What the fault tests (test_driver_kill.py, test_fault_matrix.py, test_delivery.py,
test_lock_renewal.py, test_standalone_cluster.py) do to a drain application: kill its driver at a stage
of a batch, fail task attempts or kill an executor while a batch is read, fail a write of the
checkpoint's records log, stop the driver's JVM past the records' locks, hold a batch in the sink while
the test takes an executor away."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from processes import driver_jvm_pid, executor_jvm_pid, first_time
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType


def kill_driver(spark: SparkSession, out: Path, once_exists: str | None) -> NoReturn:
    """SIGKILLs the driver JVM and ends this process; with `once_exists`, first writes
    `<out>/kill-pending` and waits (300 s at most) until that path exists: another query is to be
    running when this one dies."""
    if once_exists:
        (out / "kill-pending").touch()
        deadline = time.monotonic() + 300
        while not Path(once_exists).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    os.kill(driver_jvm_pid(spark), signal.SIGKILL)
    os._exit(137)


# The scheme of the checkpoint store that misbehaves once (integration-tests/jvm-helpers).
FAILING_STORE_SCHEME = "faulty"
RECORDS_LOG_FAULTS = ("part-write-failure", "part-logged-stall")


def records_log_fault(out: Path, fault: str) -> dict[str, str]:
    """The Spark confs of a checkpoint store (the local disk under the scheme `faulty`) that misbehaves
    once in the application at an after-log part past a round's first. `part-write-failure`: the
    part's write fails, so the task that polled it fails before it logs it. `part-logged-stall`: once
    the part is in place, its writer stalls for 10 minutes before it ACCEPTs it. `<out>/<fault>-injected`
    records that the fault struck."""
    setting = {"part-write-failure": "fail-part-write", "part-logged-stall": "stall-after-part-write"}[fault]
    return {
        f"spark.hadoop.fs.{FAILING_STORE_SCHEME}.impl": "example.faults.RecordsLogFaultsFileSystem",
        f"spark.hadoop.fs.{FAILING_STORE_SCHEME}.{setting}": str(out.resolve() / f"{fault}-injected"),
        f"spark.hadoop.fs.{FAILING_STORE_SCHEME}.stall-ms": "600000",
    }


def pause_jvm(spark: SparkSession, seconds: float) -> None:
    """Stops the driver's JVM (SIGSTOP) for `seconds`: nothing renews its records' locks meanwhile."""
    pid = driver_jvm_pid(spark)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def hold_for_executor_loss(out: Path, readers: list[int]) -> None:
    """Writes the pids of the executor JVMs whose consumers read the batch in the sink to
    `<out>/held-by`, then waits (120 s at most) until `<out>/hold-released` exists. The batch is not
    committed meanwhile, so its records stay locked in those consumers: a test that takes one of them
    away takes records it held."""
    pending = out / "held-by.tmp"
    pending.write_text(" ".join(map(str, readers)))
    pending.rename(out / "held-by")
    deadline = time.monotonic() + 120
    while not (out / "hold-released").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


@F.udf(StringType())  # a type, not a DDL string: no session exists at import
def slowly(value: str) -> str:
    """10 ms a record: a batch's tasks still read when a timer, or another process, strikes."""
    time.sleep(0.01)
    return value


def with_fault(out: Path, fault: str, task_failures: int) -> Callable[[Column], Column]:
    """A UDF that injects `fault` once into the tasks that run it: `task-failure` fails the first
    `task_failures` attempts (counted in `out`, across runs that share it), `executor-kill` SIGKILLs
    the executor JVM of the first."""

    def inject(value: str) -> str:
        if fault == "task-failure" and any(
            first_time(out, "task-failure-injected" + (f"-{n}" if n else "")) for n in range(task_failures)
        ):
            raise RuntimeError("injected task failure")
        if fault == "executor-kill" and first_time(out, "executor-kill-injected"):
            os.kill(executor_jvm_pid(), signal.SIGKILL)
        return value

    return F.udf(inject, StringType())
