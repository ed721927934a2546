"""The driver is SIGKILLed after the sink wrote a batch but before Spark committed it; the query
restarts from the same checkpoint. Nothing may be lost: the killed batch's records were never
acknowledged, so the group delivers them again once their locks expire."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import KafkaCluster, drained_rows, lost_and_duplicated, run_drain_job, values


def test_driver_killed_between_sink_write_and_commit_loses_nothing(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    topic = kafka.new_topic()
    expected = values(1_000)
    kafka.produce(topic, expected)
    assert run_drain_job(topic, group, tmp_path, "--kill-at", "sink-written") != 0
    killed = {value for value, _ in json.loads((tmp_path / "out" / "killed.json").read_text())}
    assert killed, "the first run was killed before its sink saw any record"

    assert run_drain_job(topic, group, tmp_path) == 0
    rows = drained_rows(tmp_path)  # the restart re-ran the killed batch id: its last write counts
    lost, _ = lost_and_duplicated(expected, [value for value, _ in rows])
    assert not lost, f"lost {len(lost)} records"
    redelivered = {value for value, delivery_count in rows if delivery_count >= 2}
    assert killed <= redelivered, "records of the killed batch were acknowledged before Spark committed it"
    assert kafka.unfinished(group, topic) == 0
