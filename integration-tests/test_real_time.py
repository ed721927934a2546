"""Real-time mode (Spark 4.1 and later): a kafka-share query with a real-time trigger, whose tasks
read records as they arrive and acknowledge them as the query processes them. Real broker, real
Spark, each query in an application of its own (jobs/real_time.py). Every run ends with each record in
the sink (duplicates counted, none lost) and the group's lag at 0, read through Kafka's Admin API."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from conftest import BOOTSTRAP, JAR, REPO, KafkaCluster, record_fault_result, share_stream, values
from expectations import assert_every_record_once

REAL_TIME_JOB = Path(__file__).parent / "jobs" / "real_time.py"
SPARK_LINE = tuple(int(n) for n in pyspark.__version__.split(".")[:2])
pytestmark = pytest.mark.skipif(
    SPARK_LINE < (4, 2), reason="real-time mode from PySpark 4.2 (test_compat runs 4.1)"
)


def run_real_time_job(topic: str, group: str, workdir: Path, *extra: str) -> int:
    """Runs jobs/real_time.py to its end; returns its exit code."""
    (workdir / "out").mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(REAL_TIME_JOB),
        "--bootstrap",
        BOOTSTRAP,
        "--topic",
        topic,
        "--group",
        group,
    ]
    command += [
        "--checkpoint",
        str(workdir / "checkpoint"),
        "--out",
        str(workdir / "out"),
        "--jar",
        JAR,
        *extra,
    ]
    python_path = os.pathsep.join([str(REPO / "python"), str(REAL_TIME_JOB.parent)])
    job = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": python_path})
    try:
        return job.wait(timeout=300)
    finally:
        job.kill()


def foreach_rows(workdir: Path) -> list[tuple[str, int, int]]:
    """(value, deliveryCount, latency ms) of every row the foreach sink wrote."""
    rows = []
    for f in (workdir / "out" / "rows").glob("*.csv"):
        for line in f.read_text().splitlines():
            value, count, latency, _ = line.split(",")
            rows.append((value, int(count), int(latency)))
    return rows


def check(
    kafka: KafkaCluster, topic: str, group: str, fault: str, expected: list[str], got: list[str], dup_ok: bool
) -> None:
    assert_every_record_once(
        expected,
        got,
        kafka=kafka,
        group=group,
        topic=topic,
        allow_duplicates_up_to=math.inf if dup_ok else 0,
        report=lambda lost, duplicated: record_fault_result("real-time", fault, lost, duplicated),
        context=f"real-time, {fault}",
    )


def test_a_foreach_sink_gets_each_record_once_from_more_consumers_than_partitions(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """A JVM foreach writer that writes each row as it gets it: the tasks ACCEPT a poll's records once
    the query asks for the row after them (after-row), so every record is ACCEPTed once, written once."""
    expected = values(3_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    assert run_real_time_job(topic, group, tmp_path, "--parallelism", "4", "--until-rows", "3000") == 0
    rows = foreach_rows(tmp_path)
    check(
        kafka,
        topic,
        group,
        "foreach sink, 4 consumers on 2 partitions",
        expected,
        [v for v, *_ in rows],
        False,
    )
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["recordsAcquired"], metrics["recordsAccepted"]) == ("3000", "3000"), metrics


def test_the_kafka_sink_gets_each_record_once_acknowledged_as_each_task_ends(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """Spark's kafka sink writes at its commit: the tasks ACCEPT their records as they end (after-task),
    after the sink's producer has flushed them."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    sink_topic = kafka.new_topic(1)
    job = ("--sink", "kafka", "--sink-topic", sink_topic, "--until-rows", "2000")
    assert run_real_time_job(topic, group, tmp_path, *job) == 0
    got = [r.value for r in kafka.consume_all(sink_topic, len(expected))]
    check(kafka, topic, group, "kafka sink", expected, got, False)


@pytest.mark.parametrize(
    ("fault", "master"),
    [("fail", "local[2,2]"), ("halt", "local-cluster[2,1,1024]")],
    ids=["task-failure", "executor-kill"],
)
def test_a_task_that_fails_or_an_executor_lost_mid_stream_loses_nothing(
    kafka: KafkaCluster, group: str, tmp_path: Path, fault: str, master: str
) -> None:
    """The sink fails its task, or ends its executor's JVM, after 300 rows. The task's unacknowledged
    records go back to the group (RELEASEd, or their locks expire), and the query reads them again:
    rows it had written before the fault come twice, none is lost."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = ("--master", master, "--fault", fault, "--fault-after-rows", "300", "--until-rows", "2000")
    assert run_real_time_job(topic, group, tmp_path, *job, "--lock-timeout-ms", "5000") == 0
    assert (tmp_path / "out" / "rows" / f"{fault}-injected").exists(), "the fault did not strike"
    name = {"fail": "task fails mid-stream", "halt": "executor JVM lost mid-stream"}[fault]
    check(kafka, topic, group, name, expected, [v for v, *_ in foreach_rows(tmp_path)], True)


def test_a_driver_killed_mid_stream_loses_nothing_and_its_restart_reads_on(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """The driver is SIGKILLed once the sink has written 300 rows; the restart from the checkpoint reads
    on, and the records the killed query had not ACCEPTed come back once their locks expire."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    locks = ("--lock-timeout-ms", "5000", "--until-rows", "2000")
    assert run_real_time_job(topic, group, tmp_path, *locks, "--kill-driver-after-rows", "300") != 0
    assert run_real_time_job(topic, group, tmp_path, *locks) == 0
    check(
        kafka,
        topic,
        group,
        "driver SIGKILL mid-stream",
        expected,
        [v for v, *_ in foreach_rows(tmp_path)],
        True,
    )


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"kafka.share.exactly.once.strategy": "two-phase-commit"}, "'kafka.share.exactly.once.strategy'"),
        ({"kafka.share.acknowledge": "after-commit"}, "'kafka.share.acknowledge'"),
        ({"maxRecordsPerTrigger": "100"}, "'maxRecordsPerTrigger'"),
    ],
    ids=["two-phase-commit", "after-commit", "maxRecordsPerTrigger"],
)
def test_options_real_time_mode_cannot_keep_are_refused_as_the_query_starts(
    spark: SparkSession,
    kafka: KafkaCluster,
    group: str,
    tmp_path: Path,
    options: dict[str, str],
    refused: str,
) -> None:
    topic = kafka.topic_with(values(10))
    query = (
        share_stream(spark, topic, group, **options)
        .writeStream.foreach(lambda row: None)
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(realTime="5 seconds")  # type: ignore[call-arg,unused-ignore]
        .start()
    )
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    assert "[KAFKA_SHARE_REAL_TIME_UNSUPPORTED]" in str(failure.value), failure.value
    assert refused in str(failure.value), failure.value


def test_a_real_time_accept_point_in_a_micro_batch_query_is_refused(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    topic = kafka.topic_with(values(10))
    query = (
        share_stream(spark, topic, group, **{"kafka.share.acknowledge": "after-row"})
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    assert "[KAFKA_SHARE_REAL_TIME_ONLY]" in str(failure.value), failure.value
