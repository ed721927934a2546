"""Share consumers on executors in JVMs of their own (local-cluster mode): each slot's tasks must go
back to the executor whose consumer acquired its records, or acknowledgements cannot be made and
the records come back when their locks expire."""

from __future__ import annotations

from pathlib import Path

from conftest import KafkaCluster, drained_rows, lost_and_duplicated, run_drain_job, values


def test_two_executors_drain_a_topic_once_with_every_acknowledgement_reaching_its_consumer(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    topic = kafka.new_topic(partitions=2)
    expected = values(6_000)
    kafka.produce(topic, expected, key=str)

    master = "local-cluster[2,1,1024]"
    assert run_drain_job(topic, group, tmp_path, "--master", master, "--parallelism", "4") == 0
    assert (tmp_path / "out" / "executors.txt").read_text() == "2"

    rows = drained_rows(tmp_path)
    lost, duplicated = lost_and_duplicated(expected, [value for value, _ in rows])
    assert (len(lost), len(duplicated)) == (0, 0), f"lost {len(lost)}, duplicated {len(duplicated)}"
    # An acknowledgement that missed its consumer would leave records held (lag > 0) or redelivered.
    assert max(count for _, count in rows) == 1
    assert kafka.total_lag(group) == 0
    assert kafka.group_state(group)["members"] == []
