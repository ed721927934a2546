"""A real Spark cluster: a standalone master and two workers of one core each (standalone_cluster.py),
and drivers that `spark-submit --master spark://...` with the connector on `--jars`. There the driver,
the master, the workers and the executors are separate processes, and a lost worker takes its
executor, and the share consumers in it, with it.

A worker SIGKILLed mid-drain leaves the records its consumers held locked until their locks expire; an
`availableNow` drain must read them once they come back, not end as if it had read everything."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BOOTSTRAP, DRAIN_JOB, JAR, REPO, KafkaCluster, drained_rows, values
from expectations import assert_every_record_once
from standalone_cluster import StandaloneCluster, spark_env, spark_submit, standalone_cluster

RECORDS = 12000
LOCK_MS = 10000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    started = standalone_cluster(tmp_path_factory.mktemp("standalone"))
    started.start()
    try:
        yield started
    finally:
        started.stop()


def start_drain(
    cluster: StandaloneCluster, topic: str, group: str, workdir: Path, *extra: str
) -> subprocess.Popen[bytes]:
    (workdir / "out").mkdir(parents=True, exist_ok=True)
    command = spark_submit(
        cluster,
        JAR,
        DRAIN_JOB,
        "--master",
        cluster.url,
        "--bootstrap",
        BOOTSTRAP,
        "--topic",
        topic,
        "--group",
        group,
        "--checkpoint",
        str(workdir / "checkpoint"),
        "--out",
        str(workdir / "out"),
        "--jar",
        JAR,
        "--parallelism",
        "2",
        "--lock-timeout-ms",
        str(LOCK_MS),
        *extra,
    )
    python_path = os.pathsep.join(p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(command, env={**spark_env(), "PYTHONPATH": python_path}, cwd=workdir)


def batches_with_records(workdir: Path) -> int:
    return sum(1 for f in (workdir / "out").glob("batch-*.json") if f.stat().st_size > 2)


def through_worker_loss(
    cluster: StandaloneCluster,
    kafka: KafkaCluster,
    group: str,
    strategy: str,
    workdir: Path,
    *mode: str,
    replaced: bool = True,
) -> None:
    """Runs the drain job in `mode` and SIGKILLs a worker, with its executor, after three batches with
    records (starting it again 15 s later if `replaced`); then checks that the job read every record,
    once under two-phase-commit, and left nothing in the group as it ended."""
    topic = kafka.new_topic(4)
    kafka.produce(topic, values(RECORDS))
    job = start_drain(
        cluster, topic, group, workdir, "--strategy", strategy, "--max-records-per-trigger", "600", *mode
    )
    try:
        deadline = time.monotonic() + 180
        while batches_with_records(workdir) < 3:
            assert job.poll() is None, "the drain ended before the worker was lost"
            assert time.monotonic() < deadline, "the drain read no three batches in 180 s"
            time.sleep(0.2)
        cluster.kill_worker(0)
        if replaced:
            time.sleep(15)
            cluster.start_worker(0)
        assert job.wait(timeout=300) == 0
    finally:
        job.kill()
        if not replaced:
            cluster.start_worker(0)
    left = kafka.unfinished(group, topic)
    got = [value for value, _ in drained_rows(workdir)]
    assert_every_record_once(
        values(RECORDS),
        got,
        allow_duplicates_up_to=math.inf if strategy == "none" else 0,
        context=f"{left} records left in the group as the job ended",
    )
    assert left == 0, f"{left} records left in the group when the job ended"
    # The lost worker's consumers held records, which the group delivered again: the case is the one meant.
    metrics = json.loads((workdir / "out" / "metrics.json").read_text())
    assert int(metrics["recordsRedelivered"]) > 0, metrics


STRATEGIES = ["none", "two-phase-commit"]


@pytest.mark.parametrize(
    "strategy", [pytest.param("none", marks=pytest.mark.full_matrix_only), "two-phase-commit"]
)
def test_an_available_now_drain_that_loses_a_worker_reads_what_its_consumers_held_before_it_ends(
    cluster: StandaloneCluster, kafka: KafkaCluster, group: str, strategy: str, tmp_path: Path
) -> None:
    through_worker_loss(cluster, kafka, group, strategy, tmp_path)


@pytest.mark.full_matrix_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_available_now_drain_whose_lost_worker_never_comes_back_reads_every_record(
    cluster: StandaloneCluster, kafka: KafkaCluster, group: str, strategy: str, tmp_path: Path
) -> None:
    through_worker_loss(cluster, kafka, group, strategy, tmp_path, replaced=False)


@pytest.mark.full_matrix_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_running_query_that_loses_a_worker_reads_every_record(
    cluster: StandaloneCluster, kafka: KafkaCluster, group: str, strategy: str, tmp_path: Path
) -> None:
    # Spark's default trigger until every record is read and acknowledged, then a stop.
    through_worker_loss(
        cluster, kafka, group, strategy, tmp_path, "--stop-once-read", str(RECORDS), "--until-acknowledged"
    )
