"""The fault-injection matrix: each exactly-once strategy against real failures, counting records
lost and duplicated in the sink. The results are printed as a table at the end of the run and
written to target/fault-matrix.md (docs/delivery-guarantees.md shows them).

Each case drains a topic with jobs/drain_topic.py: one run, in a Spark application of its own, that
is killed, then a restart from the same checkpoint that drains the rest. A run that needs no
application of its own (a restart, or a run with no fault in its JVMs) runs in the test's Spark
session (conftest.drain_in_session), which saves an application's start. The sink skips a batch id
it already wrote, like the file sink and Delta: the case where re-run batches matter.

`make fault-matrix` runs every case. `make test`, and so CI, runs each fault under a strategy it
puts at risk (mostly those whose guarantee is exact); the other cases carry the `full_matrix_only`
mark.
"""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
from collections.abc import Collection, Iterable
from pathlib import Path

import pytest

from conftest import (
    KILLED_DRIVER_LOCKS,
    KafkaCluster,
    drain_in_session,
    drained_rows,
    local_broker,
    record_fault_result,
    run_drain_job,
    start_drain_job,
    values,
    wait_until,
)
from expectations import assert_every_record_once, lost_and_duplicated

STRATEGIES = ["none", "checkpoint-dedup", "two-phase-commit", "after-log"]
DRIVER_KILL_STAGES = ["tasks-running", "sink-written", "committed"]
FULL_MATRIX_ONLY = pytest.mark.full_matrix_only


def cases(names: str, in_ci: Collection[tuple[str, ...]], *axes: Iterable[str]) -> pytest.MarkDecorator:
    """Parametrizes a test over every combination of `axes`; those not `in_ci` run only in
    `make fault-matrix`."""
    return pytest.mark.parametrize(
        names,
        [
            pytest.param(*case, id="-".join(case), marks=() if case in in_ci else FULL_MATRIX_ONLY)
            for case in itertools.product(*axes)
        ],
    )


def strategy_flags(strategy: str) -> tuple[str, ...]:
    """jobs/drain_topic.py's flags for a strategy of the matrix: `after-log` is `two-phase-commit`
    with kafka.share.acknowledge=after-log, which ACCEPTs records once the checkpoint logs them."""
    if strategy == "after-log":
        return ("--strategy", "two-phase-commit", "--option", "kafka.share.acknowledge=after-log")
    return ("--strategy", strategy)


def duplicates_allowed(strategy: str, stage: str) -> bool:
    """Where a strategy's guarantee permits duplicates (docs/delivery-guarantees.md says why)."""
    if strategy in ("two-phase-commit", "after-log"):
        return False
    # checkpoint-dedup drops redeliveries of records in batches Spark committed; a batch the sink
    # wrote but Spark never committed is re-run empty, and its records come back to a later batch.
    return strategy == "none" or stage == "sink-written"


def upserted(expected: list[str], db: Path, *jobs: Path) -> list[str]:
    """The values the `upsert` sink's table holds, once it is clear that some record reached the sink
    more than once (in the deliveries of the jobs that ran in these directories)."""
    deliveries = [
        json.loads(line)[0]
        for job in jobs
        for line in (job / "out" / "deliveries.json").read_text().splitlines()
    ]
    _, redelivered = lost_and_duplicated(expected, deliveries)
    assert redelivered, "no record reached the sink twice: the fault did not exercise the upsert"
    with sqlite3.connect(db) as connection:
        return [value for (value,) in connection.execute("SELECT value FROM records")]


# In make test the two-queries case below covers this one: the same upsert sink, the same kill at
# sink-written, the restart from the checkpoint, one row per record, and a record written twice.
@cases("stage", set(), ["sink-written", "committed"])
def test_idempotent_sink_recipe_keeps_one_row_per_record_when_the_driver_is_killed(
    kafka: KafkaCluster, group: str, tmp_path: Path, stage: str
) -> None:
    """Strategy `idempotent`: the JDBC (SQLite) upsert keyed by (topic, partition, offset) absorbs the
    redeliveries that reach the sink after the driver dies."""
    expected = values(1_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = ("--strategy", "idempotent", "--sink", "upsert", *KILLED_DRIVER_LOCKS)
    assert run_drain_job(topic, group, tmp_path, *job, "--kill-at", stage) != 0, "the driver was not killed"
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0

    stored = upserted(expected, tmp_path / "out" / "sink.db", tmp_path)
    assert_and_record(
        kafka, topic, group, "idempotent", f"driver SIGKILL: {stage}", expected, stored, dup_ok=False
    )


# In make test: after-log (which logs as two-phase-commit does) killed once its sink wrote;
# two-phase-commit's sink-written case is test_driver_kill.py's re-run case, the same kill and restart
# with RELEASE marks in the killed batch. A committed batch's records delivered again are dropped as
# logged, which the unrenewed-locks case below checks in make test.
@cases(
    "strategy,stage",
    {
        ("after-log", "sink-written"),
    },
    STRATEGIES,
    DRIVER_KILL_STAGES,
)
def test_driver_killed_then_restarted_from_the_checkpoint(
    kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str, stage: str
) -> None:
    expected = values(1_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    common = (*strategy_flags(strategy), "--sink", "skip", *KILLED_DRIVER_LOCKS)

    assert run_drain_job(topic, group, tmp_path, *common, "--kill-at", stage) != 0, (
        "the driver was not killed"
    )
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *common) == 0

    got = [value for value, _ in drained_rows(tmp_path)]
    dup_ok = duplicates_allowed(strategy, stage)
    assert_and_record(kafka, topic, group, strategy, f"driver SIGKILL: {stage}", expected, got, dup_ok=dup_ok)
    if not dup_ok and stage != "tasks-running":
        killed = json.loads((tmp_path / "out" / "killed.json").read_text())
        metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
        if strategy == "after-log":
            # The killed batch's records were ACCEPTed once logged: the group never hands them out
            # again (the sink skips the re-run batch's id without reading its logged records).
            assert killed, "the first run was killed before its sink saw any record"
            assert int(metrics["recordsDeduplicated"]) == 0, metrics
        else:
            # The killed batch reached the sink and its records were never acknowledged: the restart
            # is handed every one of them again, drops each (the source metrics say so) and ACCEPTs it
            # (with its next poll, or as the query stops: `backlogRecords` may still count them at the end).
            assert int(metrics["recordsDeduplicated"]) == len(killed), metrics
            assert metrics["recordsAccepted"] == metrics["recordsAcquired"], metrics


@FULL_MATRIX_ONLY
def test_checkpoint_dedup_with_a_sink_that_replaces_a_rerun_batch(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """The sink-written case that checkpoint-dedup cannot make exact with a sink that skips a batch
    id it wrote: with a sink that replaces the batch's output instead, the re-run (empty) batch
    replaces what the killed run wrote, and the records come back once, in a later batch."""
    expected = values(1_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    common = ("--strategy", "checkpoint-dedup", "--sink", "overwrite", *KILLED_DRIVER_LOCKS)
    assert run_drain_job(topic, group, tmp_path, *common, "--kill-at", "sink-written") != 0, (
        "the driver was not killed"
    )
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *common) == 0
    got = [value for value, _ in drained_rows(tmp_path)]
    fault = "driver SIGKILL: sink-written, sink replaces a re-run batch"
    assert_and_record(kafka, topic, group, "checkpoint-dedup", fault, expected, got, dup_ok=False)


def assert_and_record(
    kafka: KafkaCluster,
    topic: str,
    group: str,
    strategy: str,
    fault: str,
    expected: list[str],
    got: list[str],
    *,
    dup_ok: bool,
) -> None:
    """Adds the case's row to the fault matrix, then checks it: no record lost (the failure message
    gives the group's lag, which tells a loss, acknowledged and never in the sink, from records the
    restart did not drain), none duplicated unless `dup_ok`, and nothing left to the group."""
    assert_every_record_once(
        expected,
        got,
        kafka=kafka,
        group=group,
        topic=topic,
        allow_duplicates_up_to=math.inf if dup_ok else 0,
        report=lambda lost, duplicated: record_fault_result(strategy, fault, lost, duplicated),
        context=f"{strategy}, {fault}",
    )


# A failed task, and a killed executor JVM (its tasks are lost with the share consumers they used).
TASK_FAULTS = {
    "task-failure": ("task fails on first attempt", "local[2,2]", "2"),
    "executor-kill": ("executor JVM SIGKILL mid-batch", "local-cluster[2,1,1024]", "4"),
}


# The source does the same for a lost executor under every strategy (its slots' records come back
# once their locks lapse); what the strategies add, the records log, a task failure exercises too.
# make test loses executors in test_real_time.py and test_after_log.py.
@cases(
    "strategy,fault",
    {("checkpoint-dedup", "task-failure")},
    STRATEGIES,
    TASK_FAULTS,
)
def test_a_task_or_an_executor_fails_mid_batch(
    kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str, fault: str
) -> None:
    name, master, parallelism = TASK_FAULTS[fault]
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = (*strategy_flags(strategy), "--sink", "skip", "--parallelism", parallelism)
    assert run_drain_job(topic, group, tmp_path, *job, "--master", master, "--fault", fault) == 0
    assert (tmp_path / "out" / f"{fault}-injected").exists(), f"no {fault} happened"
    # Drains what came back after the run ended.
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    got = [value for value, _ in drained_rows(tmp_path)]
    # `none` promises at-least-once only: the records a dead executor's consumers held come back.
    assert_and_record(kafka, topic, group, strategy, name, expected, got, dup_ok=strategy == "none")


def test_after_log_a_task_failing_between_a_parts_poll_and_its_write_is_retried_elsewhere(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """after-log: the first round with records logs its first part and polls the next, whose write the
    checkpoint's store fails. Spark retries the task on the other executor (excludeOnFailure), which
    ends the round where its logged parts end and reads them back. The failed attempt's consumer still
    holds the part it never logged, which no sink saw: it must RELEASE it, not ACCEPT it with the
    committed round."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=1, key=str)
    job = (*strategy_flags("after-log"), "--sink", "skip", "--parallelism", "1")
    # Rounds of 200 records in parts of 50.
    job += ("--max-records-per-trigger", "200", "--option", "kafka.max.poll.records=50")
    job += ("--option", "kafka.share.acquire.mode=record_limit")
    retried_elsewhere = ("--spark-conf", "spark.excludeOnFailure.enabled=true")
    fault = ("--master", "local-cluster[2,1,1024]", *retried_elsewhere, "--fault", "part-write-failure")
    assert run_drain_job(topic, group, tmp_path, *job, *fault) == 0
    assert (tmp_path / "out" / "part-write-failure-injected").exists(), "no part's write failed"
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert int(metrics["recordsReplayed"]) > 0, f"the retry did not read the logged parts back: {metrics}"
    # Drains what came back after the run ended.
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    got = [value for value, _ in drained_rows(tmp_path)]
    fault_name = "task fails between a part's poll and its write, retried elsewhere"
    assert_and_record(kafka, topic, group, "after-log", fault_name, expected, got, dup_ok=False)


LOCK_MS = 3000


@cases(
    "strategy,renewal",
    {("checkpoint-dedup", "renewed"), ("two-phase-commit", "refused")},
    STRATEGIES,
    ["renewed", "refused"],
)
def test_a_batch_outlives_the_acquisition_lock(
    kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str, renewal: str
) -> None:
    """The first batch with records stays in the sink for three lock durations. Renewed locks keep
    its records from coming back; when the group refuses renewal they do come back, and only the
    strategies that remember delivered records can drop them. One drain: it must not end before it
    has taken back what came back (records whose ACCEPT found the lock expired)."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    if renewal == "refused":
        kafka.refuse_lock_renewal(group)
    job = (*strategy_flags(strategy), "--sink", "skip", "--lock-timeout-ms", str(LOCK_MS))
    slow = ("--slow-batch-s", str(3 * LOCK_MS / 1000))
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job, *slow) == 0
    assert (tmp_path / "out" / "slow-batch").exists(), "no batch with records was slowed"
    got = [value for value, _ in drained_rows(tmp_path)]
    fault = "batch outlives the lock" + (" (renewal refused)" if renewal == "refused" else "")
    assert_and_record(
        kafka,
        topic,
        group,
        strategy,
        fault,
        expected,
        got,
        dup_ok=strategy == "none" and renewal == "refused",
    )


@cases("strategy", {("checkpoint-dedup",)}, STRATEGIES)
def test_a_batch_is_read_again_after_its_locks_expired_unrenewed(
    kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str
) -> None:
    """The JVM stops between two reads of a batch (the sink reads it twice, like a foreachBatch that
    counts, then writes) until the locks expire; on waking, their renewal is refused. The second read
    must still return every record of the first: the strategies that log rounds drop the records'
    redelivery as already delivered."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = (*strategy_flags(strategy), "--sink", "skip", "--lock-timeout-ms", str(LOCK_MS))
    assert run_drain_job(topic, group, tmp_path, *job, "--pause-jvm-s", str(3 * LOCK_MS / 1000)) == 0
    assert (tmp_path / "out" / "jvm-paused").exists(), "no batch with records was read twice"
    # Drains what came back after the run ended.
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    got = [value for value, _ in drained_rows(tmp_path)]
    fault = "JVM paused past the lock between two reads of a batch"
    assert_and_record(kafka, topic, group, strategy, fault, expected, got, dup_ok=strategy == "none")


BROKER_RESTART_MOMENTS = {
    "after-a-batch": "broker restart mid-stream",
    "inside-a-round": "broker restart while a batch holds its records",
}


@cases(
    "strategy,moment",
    {("checkpoint-dedup", "inside-a-round")},
    STRATEGIES,
    BROKER_RESTART_MOMENTS,
)
def test_the_broker_restarts_mid_stream(
    kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str, moment: str
) -> None:
    """The restart outlasts the driver's Admin timeout, made short here: the query waits it out
    (option fetchOffset.numRetries) while its consumers reconnect. `inside-a-round` restarts it while
    the consumers hold a batch's records that the sink has read and not yet written (the broker
    forgets their acquisition, so the acknowledgements after the commit find them handed out again)."""
    expected = values(20_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = (*strategy_flags(strategy), "--sink", "skip", "--max-records-per-trigger", "500")
    job += ("--option", "kafka.default.api.timeout.ms=3000", "--option", "fetchOffset.numRetries=100")
    if moment == "inside-a-round":
        job += ("--slow-batch-s", "12")
    running = start_drain_job(topic, group, tmp_path, *job)
    try:
        if moment == "inside-a-round":
            wait_until(lambda: (tmp_path / "out" / "slow-batch").exists(), 120, "a batch held in the sink")
        else:
            wait_until(
                lambda: any(f.stat().st_size > 2 for f in (tmp_path / "out").glob("batch-*.json")),
                120,
                "a batch",
            )
        local_broker("restart")
        assert running.wait(timeout=300) == 0
    finally:
        running.kill()
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    got = [value for value, _ in drained_rows(tmp_path)]
    fault = BROKER_RESTART_MOMENTS[moment]
    assert_and_record(kafka, topic, group, strategy, fault, expected, got, dup_ok=strategy == "none")


def two_queries_one_killed(
    kafka: KafkaCluster,
    topic: str,
    group: str,
    tmp_path: Path,
    job: tuple[str, ...],
    kill: tuple[str, ...],
    b_ran: str,
) -> None:
    """Query a (`<tmp_path>/a`) runs `job` and dies at its `kill` stage once query b (`<tmp_path>/b`) has
    written `<b>/out/<b_ran>`: both are in the group then, however slowly either starts (started
    together, the first up could drain the topic alone). Once b has drained, a restarts."""
    kill = (*kill, "--kill-once-exists", str(tmp_path / "b" / "out" / b_ran))
    killed = start_drain_job(topic, group, tmp_path / "a", *job, *kill)
    survivor = None
    try:
        wait_until(
            lambda: (tmp_path / "a" / "out" / "kill-pending").exists(), 180, "query a to reach its kill"
        )
        survivor = start_drain_job(topic, group, tmp_path / "b", *job)
        assert killed.wait(timeout=300) != 0, "query a was not killed"
        assert survivor.wait(timeout=300) == 0
    finally:
        killed.kill()
        if survivor:
            survivor.kill()
    assert drain_in_session(kafka.spark, topic, group, tmp_path / "a", *job) == 0  # query a restarts


# `idempotent` runs in make test: the same kill, the killed query's records read again by the other,
# and the check that nothing is lost, with the upsert that absorbs the second reads on top.
@cases("strategy", {("idempotent",)}, [*STRATEGIES, "idempotent"])
def test_two_queries_share_a_group_and_one_is_killed(
    kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str
) -> None:
    """Every strategy deduplicates within one query only: the killed query's records come back to
    either query, so both can write them. `idempotent` has both queries upsert into one table keyed by
    the record coordinates, which absorbs that (docs/delivery-guarantees.md says why nothing else can)."""
    expected = values(6_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    upsert = strategy == "idempotent"
    sink = ("--sink", "upsert", "--sink-db", str(tmp_path / "sink.db")) if upsert else ("--sink", "skip")
    # Short locks: the survivor reads the killed query's records once their locks expire.
    job = (*strategy_flags(strategy), *sink, "--max-records-per-trigger", "500", *KILLED_DRIVER_LOCKS)
    b_ran = "deliveries.json" if upsert else "batch-0.json"
    two_queries_one_killed(kafka, topic, group, tmp_path, job, ("--kill-at", "sink-written"), b_ran)
    fault = "two queries in a group, one SIGKILLed"
    if not upsert:
        got = [value for q in ("a", "b") for value, _ in drained_rows(tmp_path / q)]
        assert_and_record(kafka, topic, group, strategy, fault, expected, got, dup_ok=True)
        return
    stored = upserted(expected, tmp_path / "sink.db", tmp_path / "a", tmp_path / "b")
    assert_and_record(kafka, topic, group, strategy, fault, expected, stored, dup_ok=False)


@FULL_MATRIX_ONLY
def test_after_log_two_queries_in_a_group_one_killed_between_a_parts_write_and_its_accept(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """after-log: query a logs a part of a round and dies (its driver SIGKILLed) before it ACCEPTs the
    part, once query b has run a batch. The part's records were never ACCEPTed: their locks expire and
    b reads them, while a's restart re-runs the round from its log with them. Nothing is lost; those
    records reach the sink twice, once from each query (docs/delivery-guarantees.md gives the count)."""
    expected = values(6_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = (
        *strategy_flags("after-log"),
        "--sink",
        "skip",
        "--max-records-per-trigger",
        "500",
        *KILLED_DRIVER_LOCKS,
    )
    job += ("--option", "kafka.max.poll.records=50", "--option", "kafka.share.acquire.mode=record_limit")
    kill = ("--fault", "part-logged-stall", "--kill-at", "part-logged")
    two_queries_one_killed(kafka, topic, group, tmp_path, job, kill, "batch-0.json")
    got = [value for q in ("a", "b") for value, _ in drained_rows(tmp_path / q)]
    fault_name = "two queries in a group, one SIGKILLed between a part's write and its ACCEPT"
    duplicated = assert_every_record_once(
        expected,
        got,
        kafka=kafka,
        group=group,
        topic=topic,
        allow_duplicates_up_to=math.inf,
        report=lambda lost, dup: record_fault_result("after-log", fault_name, lost, dup),
        context=f"after-log, {fault_name}",
    )
    print(f"after-log, {fault_name}: {len(duplicated)} records reached the sink twice")
