"""The driver is SIGKILLed after the sink wrote a batch but before Spark committed it; the query
restarts from the same checkpoint. Nothing may be lost: the killed batch's records were never
acknowledged, so the group delivers them again once their locks expire.

A restart that needs no application of its own runs in the test's own Spark session
(conftest.drain_in_session): a new query from the checkpoint, not a new driver, is what it tests."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, TopicPartition

from conftest import (
    KILLED_DRIVER_LOCK_S,
    KILLED_DRIVER_LOCKS,
    KafkaCluster,
    drain_in_session,
    drained_rows,
    run_drain_job,
    start_drain_job,
    values,
    wait_until,
)
from expectations import assert_every_record_once


def test_driver_killed_between_sink_write_and_commit_loses_nothing(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(1_000)
    topic = kafka.topic_with(expected)
    assert run_drain_job(topic, group, tmp_path, *KILLED_DRIVER_LOCKS, "--kill-at", "sink-written") != 0
    killed = {value for value, _ in json.loads((tmp_path / "out" / "killed.json").read_text())}
    assert killed, "the first run was killed before its sink saw any record"

    assert drain_in_session(kafka.spark, topic, group, tmp_path, *KILLED_DRIVER_LOCKS) == 0
    rows = drained_rows(tmp_path)  # the restart re-ran the killed batch id: its last write counts
    got = [value for value, _ in rows]
    assert_every_record_once(
        expected, got, kafka=kafka, group=group, topic=topic, allow_duplicates_up_to=math.inf
    )
    redelivered = {value for value, delivery_count in rows if delivery_count >= 2}
    assert killed <= redelivered, "records of the killed batch were acknowledged before Spark committed it"


# test_a_batch_re_run_under_two_phase_commit_that_releases_nothing_holds_every_record_once runs the
# same restart in `make test`.
@pytest.mark.extended
def test_explicit_marks_on_a_batch_re_run_after_a_restart_under_two_phase_commit(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(1_000)
    topic = kafka.topic_with(expected)
    # The sink RELEASEs the first delivery of every tenth record. The first run dies after its sink
    # wrote a batch; the restart re-runs that batch from the records log, and the sink marks it again.
    job = ("--strategy", "two-phase-commit", "--release-every", "10", *KILLED_DRIVER_LOCKS)
    assert run_drain_job(topic, group, tmp_path, *job, "--kill-at", "sink-written") != 0
    killed = {value for value, _ in json.loads((tmp_path / "out" / "killed.json").read_text())}
    assert killed, "the first run was killed before its sink saw any record"

    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    # A drain ends with the backlog it found at its start: once the killed run's locks have lapsed,
    # a third one takes what came back since.
    time.sleep(KILLED_DRIVER_LOCK_S + 1)
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    rows = drained_rows(tmp_path)
    released = {v for v in expected if int(v.split("-")[1]) % 10 == 0}
    # Exactly once in the committed batches, but for the released records, which come once more.
    got = [value for value, _ in rows]
    duplicated = assert_every_record_once(
        expected, got, kafka=kafka, group=group, topic=topic, allow_duplicates_up_to=math.inf
    )
    assert set(duplicated) == released, f"not released, yet twice: {sorted(set(duplicated) - released)[:5]}"
    assert released <= {value for value, count in rows if count >= 2}


@pytest.mark.compat
def test_a_batch_re_run_under_two_phase_commit_that_releases_nothing_holds_every_record_once(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """The first run RELEASEs every tenth record of a batch and dies before Spark commits it; the
    restart re-runs the batch with the same records and marks none. The committed batch then holds
    every record, so none may reach the sink again: the first run's RELEASE marks are not the batch's."""
    expected = values(1_000)
    topic = kafka.topic_with(expected)
    job = ("--strategy", "two-phase-commit", "--sink", "skip", *KILLED_DRIVER_LOCKS)
    first_run = (*job, "--release-every", "10", "--kill-at", "sink-written")
    assert run_drain_job(topic, group, tmp_path, *first_run) != 0
    killed = {value for value, _ in json.loads((tmp_path / "out" / "killed.json").read_text())}
    assert any(int(v.split("-")[1]) % 10 == 0 for v in killed), "the killed batch marked no record"

    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    # Once the killed run's locks have lapsed, a third drain takes what came back since.
    time.sleep(KILLED_DRIVER_LOCK_S + 1)
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    rows = drained_rows(tmp_path)
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)


# In make test-extended: KafkaShareReplayReaderSuite finds deleted records gone against the broker, and
# test_acls.py runs a re-run batch that cannot be read, failing with what to do, in make test.
@pytest.mark.extended
@pytest.mark.parametrize("accept", ["after-commit", "after-log"])
def test_a_batch_to_re_run_whose_records_are_deleted_fails_saying_so_and_a_new_checkpoint_goes_on(
    kafka: KafkaCluster, group: str, tmp_path: Path, accept: str
) -> None:
    # Under two-phase-commit the restart must re-run the killed batch with the records it logged. If
    # retention removed them meanwhile (here Admin deleteRecords), it cannot: the query fails with
    # what to do, and doing that (a new checkpoint) reads on from the group's position. Batch ids
    # start at 0 again there, and the sink already holds those ids: it skips them, as Spark's file
    # sink and Delta do, without reading them, so their records wait for later batches. Under
    # after-log the killed batch's records were ACCEPTed once logged: the log is all that has them.
    topic = kafka.topic_with(values(400, "a"))
    job = ("--strategy", "two-phase-commit", "--max-records-per-trigger", "100")
    job += ("--option", f"kafka.share.acknowledge={accept}")
    assert run_drain_job(topic, group, tmp_path, *job) == 0
    kafka.produce(topic, values(1_000, "c"))
    assert run_drain_job(topic, group, tmp_path, *job, "--kill-at", "sink-written") != 0
    assert json.loads((tmp_path / "out" / "killed.json").read_text()), "killed before the sink saw a record"
    for future in kafka.admin.delete_records([TopicPartition(topic, 0, OFFSET_END)]).values():
        future.result(timeout=30)
    kafka.produce(topic, values(300, "b"))

    assert run_drain_job(topic, group, tmp_path, *job) != 0
    failure = (tmp_path / "out" / "failure.txt").read_text()
    assert "[KAFKA_SHARE_REPLAY_RECORDS_GONE] The batch of round" in failure, failure
    assert f"Kafka no longer has some of them, for example {topic}-0@400" in failure, failure
    assert "restart the query from a new checkpoint location" in failure
    assert "one that reads a batch before it skips it would drop them" in failure

    held = {f.name for f in (tmp_path / "out").glob("batch-*.json")}
    assert len(held) >= 4, f"the sink holds only {sorted(held)}: batch ids that the new run skips"
    new_run = (*job, "--sink", "skip")
    assert run_drain_job(topic, group, tmp_path, *new_run, checkpoint=tmp_path / "new-checkpoint") == 0
    rows = [value for value, _ in drained_rows(tmp_path) if value.startswith("b")]
    assert_every_record_once(values(300, "b"), rows, kafka=kafka, group=group, topic=topic)


def test_an_after_log_checkpoint_restarts_only_under_the_strategy_that_re_runs_its_batch(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """The driver dies after the sink wrote an after-log batch, whose records were ACCEPTed once logged.
    A restart under checkpoint-dedup would re-run the batch empty, and the sink, which replaces a batch
    id's output, would lose them: it is refused, saying what to do. The restart under two-phase-commit
    (with the default accept point) re-runs it from the records log; once it has committed a batch, the
    checkpoint takes checkpoint-dedup."""
    expected = values(1_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    sink = ("--sink", "overwrite", *KILLED_DRIVER_LOCKS)
    after_log = ("--strategy", "two-phase-commit", "--option", "kafka.share.acknowledge=after-log", *sink)
    assert run_drain_job(topic, group, tmp_path, *after_log, "--kill-at", "sink-written") != 0
    assert json.loads((tmp_path / "out" / "killed.json").read_text()), "killed before its sink saw a record"

    dedup = ("--strategy", "checkpoint-dedup", *sink)
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *dedup) == 1
    failure = (tmp_path / "out" / "failure.txt").read_text()
    assert "[KAFKA_SHARE_CHECKPOINT_NEEDS_REPLAY]" in failure, failure
    assert "'two-phase-commit'" in failure, failure

    later = values(300, prefix="later")
    kafka.produce(topic, later, key=str)  # a batch after the re-run one, which commits it
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *sink, "--strategy", "two-phase-commit") == 0
    last = values(200, prefix="last")
    kafka.produce(topic, last, key=str)
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *dedup) == 0
    got = [value for value, _ in drained_rows(tmp_path)]
    assert_every_record_once(expected + later + last, got, kafka=kafka, group=group, topic=topic)


# test_real_time.py's driver kill covers a query with async progress tracking killed and restarted.
@pytest.mark.extended
def test_a_query_with_async_progress_tracking_into_kafka_killed_mid_stream_loses_nothing(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """Kafka to Kafka, the pipeline Spark's async progress tracking is for: its offset log holds only
    the first batch, so the restart runs again from there, and the driver dies while the sink is
    writing a batch. Every record must reach the sink topic; one reaches it twice only if the group
    delivered it again (the killed batch's, once their locks lapsed)."""
    topic = kafka.new_topic(partitions=2)
    sink_topic = kafka.new_topic()
    expected = values(2_000)
    kafka.produce(topic, expected)
    # 200 records a consumer and batch at 10 ms each: a batch writes for about 2 s.
    job = ("--sink", "kafka", "--sink-topic", sink_topic, "--async-progress", *KILLED_DRIVER_LOCKS)
    job += ("--max-records-per-trigger", "400")
    assert run_drain_job(topic, group, tmp_path, *job, "--kill-at", "mid-stream") != 0
    completed = int((tmp_path / "out" / "killed-after-batch").read_text())
    logged = [int(f.name) for f in (tmp_path / "checkpoint" / "offsets").iterdir() if f.name.isdigit()]
    assert max(logged) < completed, f"the offset log had batch {completed}: not the case tested"

    restart = start_drain_job(topic, group, tmp_path, *job)
    try:
        # The killed batch's records come back once their locks lapse.
        wait_until(lambda: kafka.unfinished(group, topic) == 0, 120, "every record acknowledged")
        (tmp_path / "out" / "done").touch()
        assert restart.wait(timeout=120) == 0
    finally:
        restart.kill()
    sink = kafka.consume_all(sink_topic, len(expected))
    written = [(record.value, int(record.headers["deliveryCount"])) for record in sink]
    lost_means = "a lost record was acknowledged before the sink wrote it"
    got = [value for value, _ in written]
    duplicated = assert_every_record_once(expected, got, allow_duplicates_up_to=math.inf, context=lost_means)
    redelivered = {value for value, delivery_count in written if delivery_count >= 2}
    assert redelivered, "no record came again: the kill did not catch a batch holding records"
    assert set(duplicated) <= redelivered, (
        f"written twice, yet delivered once: {sorted(set(duplicated) - redelivered)[:5]}"
    )
