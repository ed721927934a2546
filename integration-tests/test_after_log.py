"""`kafka.share.acknowledge=after-log` against the default `after-commit`: when a batch's records are
ACCEPTed, read back through Kafka's Admin API while the batch runs, and what that lets a batch hold.
Real broker, real Spark. The fault matrix (test_fault_matrix.py) runs `after-log` against failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from conftest import (
    KILLED_DRIVER_LOCKS,
    KafkaCluster,
    drain_in_session,
    drained_rows,
    read_again_elsewhere,
    run_drain_job,
    share_stream,
    values,
)
from expectations import assert_every_record_once
from test_fault_matrix import strategy_flags

POLL_RECORDS = 500
AFTER_LOG = strategy_flags("after-log")


@pytest.mark.parametrize("accept", ["after-commit", "after-log"])
def test_when_a_batch_is_accepted_and_how_many_records_it_holds(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path, accept: str
) -> None:
    """Inside each batch, before Spark commits it, the test reads the share-partition's start offset:
    under `after-commit` the batch's records are still locked (the start offset is at or below its
    first record), under `after-log` they are ACCEPTed already (it is past its first part; Kafka may
    report the last acknowledgement's state write a little late). Under
    `after-commit` a batch holds one poll per consumer; under `after-log` a consumer polls on, each
    poll logged as a part of the round, so a batch holds several polls."""
    expected = values(3_000)
    topic = kafka.topic_with(expected, partitions=1)
    seen: list[tuple[list[str], int, int, int]] = []  # values, first and last offset, start offset

    def batch(df: DataFrame, _: int) -> None:
        rows = df.selectExpr("cast(value as string) v", "offset").collect()
        if rows:
            offsets = [r.offset for r in rows]
            (partition,) = kafka.group_state(group)["partitions"]
            seen.append(([r.v for r in rows], min(offsets), max(offsets), int(partition["startOffset"])))

    options: dict[str, Any] = {
        "startingOffsets": "earliest",
        "kafka.share.parallelism": "1",
        "kafka.max.poll.records": str(POLL_RECORDS),
        "kafka.share.acquire.mode": "record_limit",
        "kafka.share.exactly.once.strategy": "two-phase-commit",
        "kafka.share.acknowledge": accept,
    }
    query = (
        share_stream(spark, topic, group, **options)
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "the drain did not end"
    assert query.exception() is None

    assert_every_record_once(expected, [v for rows, *_ in seen for v in rows])
    sizes = [len(rows) for rows, *_ in seen]
    parts = sorted(p.name for p in (tmp_path / "checkpoint").glob("sources/0/kafka-share-rounds/*/0.*.json"))
    if accept == "after-commit":
        assert all(start <= first for _, first, _, start in seen), seen_offsets(seen)
        assert max(sizes) <= POLL_RECORDS, sizes
        assert not parts, parts
    else:
        several_parts = [(first, start) for rows, first, _, start in seen if len(rows) > POLL_RECORDS]
        assert several_parts, sizes
        assert parts, "no round was logged in parts"
        assert all(start > first for first, start in several_parts), seen_offsets(seen)
    assert kafka.total_lag(group) == 0


def seen_offsets(seen: list[tuple[list[str], int, int, int]]) -> list[tuple[int, int, int]]:
    """(first offset, last offset, start offset) of each batch, for a failure message."""
    return [(first, last, start) for _, first, last, start in seen]


def test_a_batch_whose_driver_died_is_re_run_from_the_log_with_its_accepted_records(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """The driver dies after the sink wrote a batch and before Spark committed it. Its records were
    ACCEPTed once logged, so the group never delivers them again: the restart re-runs the batch with
    them, read back from the log by their coordinates, and the sink, which replaces a batch id's
    output, holds every record once."""
    expected = values(1_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = (*AFTER_LOG, *KILLED_DRIVER_LOCKS)
    assert run_drain_job(topic, group, tmp_path, *job, "--kill-at", "sink-written") != 0, (
        "the driver was not killed"
    )
    killed = json.loads((tmp_path / "out" / "killed.json").read_text())
    assert killed, "the first run was killed before its sink saw any record"

    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert int(metrics["recordsReplayed"]) == len(killed), metrics
    assert int(metrics["recordsDeduplicated"]) == 0, metrics
    rows = drained_rows(tmp_path)
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)
    # The killed batch's records come from the log, never from the group again. Records the killed run
    # held unlogged (acquired by its fetches, not yet polled or in a part not yet ACCEPTed) come back
    # after their locks with a delivery count of 2: no sink saw them.
    in_killed_batch = {value for value, _ in killed}
    assert all(count == 1 for value, count in rows if value in in_killed_batch), (
        "a logged record was delivered again"
    )


# test_fault_matrix's task failing between a part's poll and its write covers this in make test: its retry
# on the other executor reads the logged parts back too.
@pytest.mark.extended
def test_a_batch_read_again_on_another_executor_holds_the_parts_the_first_read_logged(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """The first batch with records is read again while the executor whose consumer read it is busy:
    Spark runs the slot's task on the other executor, which has no consumer holding the round. It ends
    the round where its parts end and reads them back by their coordinates, so both reads hold the
    same records, none of which the group delivers again (they were ACCEPTed once logged)."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, key=str)
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "1", *AFTER_LOG)
    # 200 records a batch, in polls of 50: a round of four parts.
    job += ("--max-records-per-trigger", "200", "--option", "kafka.max.poll.records=50")
    first, second = read_again_elsewhere(topic, group, tmp_path, len(expected), *job)
    assert len(first["values"]) > 50, "the round had one part"
    assert sorted(second["values"]) == sorted(first["values"])
    rows = drained_rows(tmp_path)
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)
