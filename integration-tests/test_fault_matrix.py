"""The fault-injection matrix: each exactly-once strategy against real failures, counting records
lost and duplicated in the sink. The results are printed as a table at the end of the run and
written to target/fault-matrix.md (docs/delivery-guarantees.md shows them).

Each case drains a topic in Spark applications of their own (jobs/drain_topic.py): one run that
is killed, then a restart from the same checkpoint that drains the rest. The sink skips a batch id
it already wrote, like the file sink and Delta: the case where re-run batches matter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import (
    KafkaCluster,
    drained_rows,
    lost_and_duplicated,
    record_fault_result,
    run_drain_job,
    values,
)

STRATEGIES = ["none", "checkpoint-dedup", "two-phase-commit"]
DRIVER_KILL_STAGES = ["tasks-running", "sink-written", "committed"]


def duplicates_allowed(strategy: str, stage: str) -> bool:
    """Where a strategy's guarantee permits duplicates (docs/delivery-guarantees.md says why)."""
    if strategy == "two-phase-commit":
        return False
    # checkpoint-dedup drops redeliveries of records in batches Spark committed; a batch the sink
    # wrote but Spark never committed is re-run empty, and its records come back to a later batch.
    return strategy == "none" or stage == "sink-written"


@pytest.mark.parametrize("stage", DRIVER_KILL_STAGES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_driver_killed_then_restarted_from_the_checkpoint(
    kafka: KafkaCluster, group: str, tmp_path: Path, strategy: str, stage: str
) -> None:
    topic = kafka.new_topic(partitions=2)
    expected = values(1_000)
    kafka.produce(topic, expected, key=str)
    common = ("--strategy", strategy, "--sink", "skip")

    assert run_drain_job(topic, group, tmp_path, *common, "--kill-at", stage) != 0, (
        "the driver was not killed"
    )
    assert run_drain_job(topic, group, tmp_path, *common) == 0

    lost, duplicated = lost_and_duplicated(expected, [value for value, _ in drained_rows(tmp_path)])
    record_fault_result(strategy, f"driver SIGKILL: {stage}", len(lost), len(duplicated))
    assert not lost, f"lost {len(lost)} records"
    if not duplicates_allowed(strategy, stage):
        assert not duplicated, f"{len(duplicated)} records reached the sink twice"
    assert kafka.total_lag(group) == 0
