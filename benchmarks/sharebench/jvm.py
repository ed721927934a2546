"""The driver JVM's heap and CPU use (in local mode the executor's too): its memory pools' peak
usage through py4j, and its CPU time, in all and by thread, from Linux's /proc.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession


def reset_peak_heap(spark: SparkSession) -> None:
    """Starts a new peak for each of the JVM's memory pools."""
    for pool in spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():  # type: ignore[union-attr]
        pool.resetPeakUsage()


def peak_heap_mb(spark: SparkSession) -> float:
    """The heap pools' peak usage since reset_peak_heap, in MB."""
    pools = spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()  # type: ignore[union-attr]
    heap = [p.getPeakUsage().getUsed() for p in pools if str(p.getType()) == "Heap memory"]
    return sum(heap) / 2**20


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
