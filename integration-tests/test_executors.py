"""Share consumers on executors in JVMs of their own (local-cluster mode): each slot's tasks must go
back to the executor whose consumer acquired its records, or acknowledgements cannot be made and
the records come back when their locks expire."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import pytest

from conftest import (
    KafkaCluster,
    drained_rows,
    read_again_elsewhere,
    run_drain_job,
    start_drain_job,
    values,
    wait_until,
)
from expectations import assert_every_record_once
from test_security import (
    OAUTH_ALLOWED_URLS,
    SCRAM_LOGIN_MODULE,
    SSL_BOOTSTRAP,
    TLS_DIR,
    TLS_PASSWORD,
    TokenEndpoint,
    alice_login,
    oauth_settings,
)


def test_two_executors_drain_a_topic_once_with_every_acknowledgement_reaching_its_consumer(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(6_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)

    master = "local-cluster[2,1,1024]"
    assert run_drain_job(topic, group, tmp_path, "--master", master, "--parallelism", "4") == 0
    assert (tmp_path / "out" / "executors.txt").read_text() == "2"

    rows = drained_rows(tmp_path)
    # An acknowledgement that missed its consumer would leave records held (lag > 0) or redelivered.
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)
    assert max(count for _, count in rows) == 1
    assert kafka.group_state(group)["members"] == []


def test_explicit_marks_reach_the_consumer_that_holds_the_records_on_another_executor(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "4", "--release-every", "10")
    assert run_drain_job(topic, group, tmp_path, *job) == 0
    # The drain reads the released records again before it ends: each is acquired twice.
    assert kafka.unfinished(group, topic) == 0

    deliveries: dict[str, list[int]] = {}
    for value, count in drained_rows(tmp_path):
        deliveries.setdefault(value, []).append(count)
    released = {v for v in expected if int(v.split("-")[1]) % 10 == 0}
    assert set(deliveries) == set(expected)

    def as_marked(value: str, counts: list[int]) -> bool:
        if value not in released:
            return counts == [1]
        # Released records come once more. One fetched in the background by a consumer whose stop
        # released it comes with a deliveryCount of 3 (docs/user-guide.md, availableNow).
        return sorted(counts) in ([1, 2], [1, 3])

    wrong = {v: c for v, c in deliveries.items() if not as_marked(v, c)}
    assert not wrong, f"{len(wrong)} records delivered other than marked, e.g. {list(wrong.items())[:5]}"
    assert kafka.unfinished(group, topic) == 0


def may_come_again(metrics: dict[str, str]) -> int:
    """How many records may reach the sink twice in a run with these source metrics: each record the
    source released comes again, and so can each whose acknowledgement was not applied. While the
    group rebalances (consumers leave and join), a consumer can lose a partition whose records it
    holds, and Kafka's client fails their acknowledgements (NOT_LEADER_OR_FOLLOWER) or finds their
    locks expired; they come back after their lock, so there can be more duplicates than records
    released."""
    return sum(int(metrics[m]) for m in ("recordsReleased", "acknowledgementsFailed", "locksExpired"))


# Four slots on two one-core executors, batches of at most 400 records (100 a consumer, so that every
# consumer holds records in a full batch).
SLOTS_ON_TWO_EXECUTORS = (
    "--master",
    "local-cluster[2,1,1024]",
    "--parallelism",
    "4",
    "--max-records-per-trigger",
    "400",
)


# test_an_available_now_drain_whose_slots_move_ends_once_what_was_left_behind_is_read_again has the
# janitor release what consumers left on a busy executor hold in `make test`.
@pytest.mark.extended
def test_consumers_left_on_a_busy_executor_that_no_slot_returns_to_give_their_records_back(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(12_000)
    topic = kafka.topic_with(expected, partitions=4, key=str)

    # From the first batch in which every consumer read 100 records, another job keeps one of the two
    # executors busy for 150 s: that executor's slots move to the other one after Spark's locality
    # wait, and no task of the query runs where their consumers hold that batch's records. Only the
    # executor's janitor, asking the driver what is committed, can give them back while the query runs.
    # The job runs until Kafka has applied an acknowledgement for every record, so that what comes back
    # after its lock (below) is read again within the run.
    occupied = ("--occupy-executor-s", "150", "--stop-once-read", str(len(expected)), "--until-acknowledged")
    assert run_drain_job(topic, group, tmp_path, *SLOTS_ON_TWO_EXECUTORS, *occupied) == 0
    assert (tmp_path / "out" / "occupied-executor").read_text().isdigit()

    rows = drained_rows(tmp_path)
    # What they held was in the batch that had just committed: under `none` it comes again, once.
    # Every duplicate is one of the records the source counted as released or not acknowledged.
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    duplicated = assert_every_record_once(
        expected,
        [value for value, _ in rows],
        kafka=kafka,
        group=group,
        topic=topic,
        allow_duplicates_up_to=may_come_again(metrics),
    )
    assert (tmp_path / "out" / "read-all.txt").read_text() == "True"
    released = int(metrics["recordsReleased"])
    assert released >= 100  # a consumer's share of the batch; two consumers stayed behind
    redelivered = {value for value, count in rows if count > 1}
    assert released <= len(duplicated), metrics
    assert set(duplicated) <= redelivered
    assert all(n == 2 for n in duplicated.values())


# The failed task's retry below moves its slot too, in a drain that must end with its records read.
@pytest.mark.extended
def test_an_available_now_drain_whose_slots_move_ends_once_what_was_left_behind_is_read_again(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """From the first batch with records, another job keeps an executor whose consumers read some of
    them busy for 30 s: its slots move to the other executor, and their consumers, left behind, hold
    that batch's records until the executor's janitor releases them. That batch takes the whole
    backlog, so a drain that counted those records as taken would end with them left to the group."""
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=4, key=str)
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "4", "--occupy-executor-s", "30")
    assert run_drain_job(topic, group, tmp_path, *job) == 0
    assert (tmp_path / "out" / "occupied-executor").read_text().isdigit()

    got = [value for value, _ in drained_rows(tmp_path)]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    # What the consumers left behind held was released, read again and accepted within the drain.
    limit = may_come_again(metrics)
    assert_every_record_once(
        expected, got, kafka=kafka, group=group, topic=topic, allow_duplicates_up_to=limit
    )
    # A consumer's share of the batch, at least one consumer left behind.
    assert int(metrics["recordsReleased"]) >= 100, metrics


# Extended: LostConsumersSuite checks the counts per executor without a broker, and make test's
# two-executor drain checks every acknowledgement reaches its consumer.
@pytest.mark.extended
def test_what_a_failed_task_counted_is_reported_when_its_retry_and_slot_move_to_another_executor(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(2_000)
    topic = kafka.topic_with(expected, partitions=2, key=str)

    # A task of the first batch with records fails after its consumer joined the group and polled.
    # Spark drops the failed task's counts; with excludeOnFailure its retry runs on the other executor,
    # where a new consumer joins for the slot, and the slot's tasks stay there. No task of the slot
    # comes back to the executor it left, so what finds its consumer left behind there (the executor's
    # janitor, or a task of the other slot) must report the failed task's join: three consumers joined.
    # The query runs until the metric says so (120 s at most): a lost join would leave it at two.
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "2", "--fault", "task-failure")
    job += ("--spark-conf", "spark.excludeOnFailure.enabled=true")
    job += ("--stop-once-read", str(len(expected)), "--until-acknowledged")
    job += ("--until-metric", "consumersJoined=3")
    assert run_drain_job(topic, group, tmp_path, *job) == 0
    out = tmp_path / "out"
    assert (out / "task-failure-injected").exists()
    assert (out / "read-all.txt").read_text() == "True"

    rows = drained_rows(tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["consumersJoined"] == "3", metrics
    # The failed attempt's records, which the sink never saw, go back to the group once its consumer
    # is found left behind; a duplicate can only be a record whose ACCEPT Kafka did not apply as the
    # group's members changed.
    not_applied = int(metrics["acknowledgementsFailed"]) + int(metrics["locksExpired"])
    got = [value for value, _ in rows]
    assert_every_record_once(
        expected, got, kafka=kafka, group=group, topic=topic, allow_duplicates_up_to=not_applied
    )


# test_lifecycle.py's stop closes every consumer and leaves the group, on one executor.
@pytest.mark.extended
def test_a_query_stopped_while_an_executor_is_busy_leaves_no_consumer_behind_in_the_group(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(4_000)
    topic = kafka.topic_with(expected, partitions=4, key=str)

    # Once everything is read and committed, another job keeps one of the two executors busy and the
    # query stops meanwhile: the stop's closing job cannot run there, so the consumers of the slots
    # that live there are left open. Their executor's janitor must close them once the driver answers
    # that their run has stopped: within seconds, not after the pool's idle timeout (5 minutes),
    # during which they would stay members of the group and hold whatever they had fetched.
    stop = ("--stop-once-read", str(len(expected)), "--stop-while-occupied", "120")
    job = start_drain_job(topic, group, tmp_path, *SLOTS_ON_TWO_EXECUTORS, *stop)
    out = tmp_path / "out"
    try:
        wait_until(lambda: (out / "stopped").exists(), 150, "the query stopped")
        stopped_at = time.monotonic()
        wait_until(lambda: not kafka.group_state(group)["members"], 30, "every consumer left the group")
        left_after = time.monotonic() - stopped_at
        assert not (out / "occupy-ended").exists(), "the busy executor was free again before they left"
        (out / "done").write_text("")
        assert job.wait(timeout=120) == 0
    finally:
        job.kill()
    print(f"the last consumers left the group {left_after:.1f} s after the stop")

    rows = drained_rows(tmp_path)
    assert (out / "read-all.txt").read_text() == "True"
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)


# test_after_log.py reads a batch again on another executor in make test.
@pytest.mark.extended
def test_a_batch_read_again_on_another_executor_loses_none_of_either_read(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(2_000)
    topic = kafka.topic_with(expected, key=str)

    # The first batch with records is read again while the executor that read it is busy, as a
    # foreachBatch with two actions may be (or a stage re-run after an executor died): the read runs
    # on the other executor, whose consumer, without a records log, acquires records of its own. The
    # sink writes the first read. Neither consumer may ACCEPT what it holds: the sink has only one
    # read, and a later action could have had the other.
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "1", "--max-records-per-trigger", "200")
    first, second = read_again_elsewhere(topic, group, tmp_path, len(expected), *job)
    assert second["values"]
    assert not set(second["values"]) & set(first["values"]), "the second read should have polled anew"
    rows = drained_rows(tmp_path)
    # Both reads' records come back: the first read's once more (the sink has them), the second's
    # for the first time. Had the home consumer ACCEPTed the first read, none would be duplicated.
    got = [value for value, _ in rows]
    duplicated = assert_every_record_once(
        expected, got, kafka=kafka, group=group, topic=topic, allow_duplicates_up_to=math.inf
    )
    assert (tmp_path / "out" / "read-all.txt").read_text() == "True"
    assert set(duplicated) == set(first["values"])


# test_security.py's TLS cases cover the truststore in local mode.
@pytest.mark.extended
def test_a_truststore_only_the_driver_has_fails_on_the_executors_saying_to_ship_it_and_works_once_shipped(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    # The driver runs where the truststore is and names it by its file name, as one does with
    # spark-submit --files; the executors' working directories have it only once it is shipped.
    expected = values(500)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    truststore = driver_dir / "kafka-truststore.p12"
    shutil.copy(TLS_DIR / "truststore.p12", truststore)
    settings = {
        "kafka.bootstrap.servers": SSL_BOOTSTRAP,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": alice_login(SCRAM_LOGIN_MODULE, "alice-secret"),
        "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.location": truststore.name,
        "kafka.ssl.truststore.password": TLS_PASSWORD,
    }
    job = ("--master", "local-cluster[2,1,1024]", "--parallelism", "2")
    job += tuple(f"--option={name}={value}" for name, value in settings.items())

    assert run_drain_job(topic, group, tmp_path / "unshipped", *job, cwd=driver_dir) != 0
    failure = (tmp_path / "unshipped" / "out" / "failure.txt").read_text()
    assert "[KAFKA_SHARE_CLIENT_NOT_CREATED] Could not create Kafka's share consumer of slot" in failure, (
        failure
    )
    assert f"Failed to load SSL keystore {truststore.name} of type PKCS12" in failure, failure
    assert "ship it with spark-submit --files (or spark.files)" in failure
    assert TLS_PASSWORD not in failure
    assert drained_rows(tmp_path / "unshipped") == []

    shipped = ("--spark-conf", f"spark.files={truststore}")
    assert run_drain_job(topic, group, tmp_path / "shipped", *job, *shipped, cwd=driver_dir) == 0
    got = [value for value, _ in drained_rows(tmp_path / "shipped")]
    assert_every_record_once(expected, got, kafka=kafka, group=group, topic=topic)


# test_security.py's mirroring cases cover the properties every Kafka client of the source reads.
@pytest.mark.extended
def test_a_batch_re_run_on_new_executors_logs_in_with_kafkas_system_properties(
    kafka: KafkaCluster, group: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # After a restart under two-phase-commit, the read-back of the batch to re-run is the first Kafka
    # client an executor JVM creates. It must read the operator's -Dorg.apache.kafka.* properties (here
    # the token endpoints OAUTHBEARER may use) under the shaded client's names, as the share consumers do.
    expected = values(1_000)
    topic = kafka.topic_with(expected)
    token_endpoint = TokenEndpoint()
    request.addfinalizer(token_endpoint.close)
    allowed = f"-Dorg.apache.kafka.{OAUTH_ALLOWED_URLS}={token_endpoint.url}"
    job = ("--master", "local-cluster[2,1,1024]", "--strategy", "two-phase-commit")
    job += ("--spark-conf", f"spark.driver.extraJavaOptions={allowed}")
    job += ("--spark-conf", f"spark.executor.extraJavaOptions={allowed}")
    job += tuple(
        f"--option={name}={value}"
        for name, value in oauth_settings(token_endpoint.url, "alice-secret").items()
    )
    assert run_drain_job(topic, group, tmp_path, *job, "--kill-at", "sink-written") != 0
    assert json.loads((tmp_path / "out" / "killed.json").read_text()), "killed before the sink saw a record"

    assert run_drain_job(topic, group, tmp_path, *job) == 0, (tmp_path / "out" / "failure.txt").read_text()
    rows = drained_rows(tmp_path)  # the restart re-ran the killed batch id: its last write counts
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)
