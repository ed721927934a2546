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


def test_explicit_marks_reach_the_consumer_that_holds_the_records_on_another_executor(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    topic = kafka.new_topic(partitions=2)
    expected = values(2_000)
    kafka.produce(topic, expected, key=str)
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "4", "--release-every", "10")
    assert run_drain_job(topic, group, tmp_path, *job) == 0
    assert run_drain_job(topic, group, tmp_path, *job) == 0  # drains released records the first run left

    deliveries: dict[str, list[int]] = {}
    for value, count in drained_rows(tmp_path):
        deliveries.setdefault(value, []).append(count)
    released = {v for v in expected if int(v.split("-")[1]) % 10 == 0}
    assert set(deliveries) == set(expected)
    wrong = {v: c for v, c in deliveries.items() if sorted(c) != ([1, 2] if v in released else [1])}
    assert not wrong, f"{len(wrong)} records delivered other than marked, e.g. {list(wrong.items())[:5]}"
    assert kafka.total_lag(group) == 0
