"""Kafka's side of the bench, through dev/kafka-tool (Kafka's command-line tools): topics filled by
Kafka's producer perf tool, share groups of their own, the share-consumer perf tool (section a), and
the local broker's version.
"""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass
from typing import Any

from . import REPO

TOOL = str(REPO / "dev" / "kafka-tool")


@dataclass(frozen=True)
class Kafka:
    """The broker the bench runs against, and the records make_topic writes to it: their size, and
    the producer's record batches (`batch.size`), which Kafka's share-partitions acquire and count
    whole."""

    bootstrap_servers: str
    record_size: int
    record_batch_bytes: int


def broker_version() -> str:
    """The Kafka release of the local broker, as dev/kafka-local last started it."""
    script = str(REPO / "dev" / "kafka-local" / "kafka-local")
    run = subprocess.run([script, "version"], capture_output=True, text=True, check=False)
    return run.stdout.strip() or "unknown"


def tool(*command: str, timeout: int = 1800) -> str:
    """Runs one of Kafka's command-line tools; its standard output."""
    run = subprocess.run([TOOL, *command], capture_output=True, text=True, timeout=timeout, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"kafka-tool {' '.join(command[:1])} failed: {run.stderr[-2000:]}")
    return run.stdout


def new_topic(kafka: Kafka, partitions: int, prefix: str = "bench") -> str:
    """A new, empty topic of `partitions`."""
    topic = f"{prefix}-{partitions}p-{uuid.uuid4().hex[:6]}"
    tool(
        "topics",
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--create",
        "--topic",
        topic,
        "--partitions",
        str(partitions),
    )
    return topic


def make_topic(kafka: Kafka, partitions: int, records: int) -> str:
    """A new topic of `partitions` holding `records` records of kafka.record_size bytes."""
    topic = new_topic(kafka, partitions)
    tool(
        "producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(kafka.record_size),
        "--throughput",
        "-1",
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--command-property",
        "linger.ms=20",
        "--command-property",
        f"batch.size={kafka.record_batch_bytes}",
    )
    return topic


def new_group(kafka: Kafka, prefix: str) -> str:
    """A share group of its own, reading from the earliest record."""
    group = f"{prefix}-{uuid.uuid4().hex[:6]}"
    tool(
        "configs",
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--alter",
        "--entity-type",
        "groups",
        "--entity-name",
        group,
        "--add-config",
        "share.auto.offset.reset=earliest",
    )
    return group


def raw_share_consumers(kafka: Kafka, topic: str, threads: int, records: int) -> dict[str, Any]:
    """Kafka's share-consumer perf tool; its summary's fields 4 and 5 are MB/s and records/s."""
    out = tool(
        "share-consumer-perf-test",
        "--bootstrap-server",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--group",
        new_group(kafka, "bench-raw"),
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
