"""A real Spark cluster: a standalone master and two workers of one core each (standalone_cluster.py),
and drivers that `spark-submit --master spark://...` with the connector on `--jars`. There the driver,
the master, the workers and the executors are separate processes, and a lost worker takes its
executor, and the share consumers in it, with it.

A worker SIGKILLed mid-drain leaves the records its consumers held locked until their locks expire; an
`availableNow` drain must read them once they come back, not end as if it had read everything. A driver
SIGKILLed under `--deploy-mode cluster --supervise` is started again by its worker, and goes on from
the checkpoint."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from conftest import BOOTSTRAP, DRAIN_JOB, JAR, REPO, KafkaCluster, drained_rows, values
from expectations import assert_every_record_once
from standalone_cluster import SPARK_HOME, StandaloneCluster, spark_env, spark_submit, standalone_cluster

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


def assert_read_every_record(
    kafka: KafkaCluster, group: str, topic: str, strategy: str, workdir: Path
) -> None:
    """The job's sink holds every record of the topic (once under two-phase-commit, any number of times
    under none), and the group has none left unacknowledged."""
    left = kafka.unfinished(group, topic)
    assert_every_record_once(
        values(RECORDS),
        [value for value, _ in drained_rows(workdir)],
        allow_duplicates_up_to=math.inf if strategy == "none" else 0,
        context=f"{left} records left in the group as the job ended",
    )
    assert left == 0, f"{left} records left in the group when the job ended"


def through_worker_loss(
    cluster: StandaloneCluster,
    kafka: KafkaCluster,
    group: str,
    strategy: str,
    workdir: Path,
    *mode: str,
    replaced: bool = True,
) -> None:
    """Runs the drain job in `mode` and SIGKILLs a worker, with its executor, while the third batch with
    records is in the sink (its records locked in the consumers that read it, one of them on that
    worker), starting it again 15 s later if `replaced`; then checks that the job read every record,
    once under two-phase-commit, and left nothing in the group as it ended."""
    topic = kafka.topic_with(values(RECORDS), partitions=4)
    out = workdir / "out"
    job = start_drain(
        cluster,
        topic,
        group,
        workdir,
        "--strategy",
        strategy,
        "--max-records-per-trigger",
        "600",
        "--hold-batch",
        "3",
        *mode,
    )
    lost = None
    try:
        deadline = time.monotonic() + 180
        while not (out / "held-by").exists():
            assert job.poll() is None, "the drain ended before the worker was lost"
            assert time.monotonic() < deadline, "the drain read no three batches in 180 s"
            time.sleep(0.2)
        lost = cluster.worker_of(int((out / "held-by").read_text().split()[0]))
        cluster.kill_worker(lost)
        (out / "hold-released").touch()
        if replaced:
            time.sleep(15)
            cluster.start_worker(lost)
        assert job.wait(timeout=300) == 0
    finally:
        job.kill()
        if lost is not None and not replaced:
            cluster.start_worker(lost)
    assert_read_every_record(kafka, group, topic, strategy, workdir)
    # The lost worker's consumers held records, which the group delivered again: the case is the one meant.
    metrics = json.loads((out / "metrics.json").read_text())
    assert int(metrics["recordsRedelivered"]) > 0, metrics


STRATEGIES = ["none", "two-phase-commit"]


# make test covers a lost executor with the fault matrix's executor kills on local-cluster.
@pytest.mark.full_matrix_only
@pytest.mark.parametrize("strategy", STRATEGIES)
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


OPEN_NIO = "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED"


def supervised_driver_jar() -> str:
    """The JVM drain application (integration-tests/supervised-driver) for this Spark, which sbt builds
    on first use: the master restarts only JVM drivers, and Python applications cannot run in cluster
    mode there."""
    project, prefix = (
        ("supervisedDriverSpark35", "supervised-driver-spark35-")
        if pyspark.__version__.startswith("3.")
        else ("supervisedDriver", "supervised-driver-")
    )
    classpath = subprocess.run(
        [str(REPO / "dev" / "sbt-classpath"), project, prefix], check=True, capture_output=True, text=True
    ).stdout.strip()
    return next(jar for jar in classpath.split(os.pathsep) if f"/{prefix}" in jar)


@pytest.mark.full_matrix_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_supervised_driver_killed_under_cluster_deploy_mode_goes_on_from_its_checkpoint(
    cluster: StandaloneCluster, kafka: KafkaCluster, group: str, strategy: str, tmp_path: Path
) -> None:
    # The driver runs on one worker (its core and 512 MB), its executor on the other. A SIGKILLed driver
    # takes its application, and the executor's consumers, with it; the worker starts it again.
    topic = kafka.topic_with(values(RECORDS), partitions=4)
    out = tmp_path / "out"
    arguments = {
        "bootstrap": BOOTSTRAP,
        "topic": topic,
        "group": group,
        "checkpoint": str(tmp_path / "checkpoint"),
        "out": str(out),
        "strategy": strategy,
        "lockTimeoutMs": str(LOCK_MS),
        "maxRecordsPerTrigger": "600",
        "parallelism": "2",
    }
    # Spark 3.5's worker starts a cluster-mode driver without the module options that spark-submit
    # gives a client-mode one on Java 17.
    submit_options = ["--deploy-mode", "cluster", "--supervise", "--class", "example.driver.DrainToFiles"]
    submit_options += ["--driver-memory", "512m", "--conf", f"spark.driver.extraJavaOptions={OPEN_NIO}"]
    command = spark_submit(
        cluster,
        JAR,
        supervised_driver_jar(),
        *(f"{name}={value}" for name, value in arguments.items()),
        submit_options=submit_options,
    )
    submitted = subprocess.run(command, env=spark_env(), capture_output=True, text=True, timeout=120)
    driver = re.search(r"driver-\d+-\d+", submitted.stdout + submitted.stderr)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert driver, submitted.stdout + submitted.stderr

    def driver_starts() -> list[str]:
        starts = out / "driver-starts.txt"
        return starts.read_text().split() if starts.exists() else []

    try:
        deadline = time.monotonic() + 180
        while batches_with_records(tmp_path) < 3:
            assert len(driver_starts()) < 2, f"the driver failed before it was killed: {driver_log(cluster)}"
            assert time.monotonic() < deadline, f"no three batches read in 180 s: {driver_log(cluster)}"
            time.sleep(0.2)
        os.kill(int(driver_starts()[0]), signal.SIGKILL)
        deadline = time.monotonic() + 300
        while not (out / "done").exists():
            assert time.monotonic() < deadline, f"the drain did not end in 300 s: {driver_log(cluster)}"
            time.sleep(0.5)
    finally:
        if not (out / "done").exists():  # the master, not a signal, stops a supervised driver for good
            kill = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url, "--kill", driver[0]]
            subprocess.run(kill, env=spark_env(), timeout=120)
    assert len(driver_starts()) == 2, "the worker did not start the killed driver again"
    assert_read_every_record(kafka, group, topic, strategy, tmp_path)


def driver_log(cluster: StandaloneCluster) -> str:
    """The end of the last cluster-mode driver's stderr, which its worker keeps in its work directory."""
    logs = sorted(
        (log for worker in cluster.workers for log in worker.work_dir.glob("driver-*/stderr")),
        key=lambda log: log.stat().st_mtime,
    )
    return logs[-1].read_text()[-3000:] if logs else "no driver log"
