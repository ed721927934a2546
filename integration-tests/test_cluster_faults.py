"""Faults of a Kafka cluster during a drain: three nodes, each a broker and a controller, topics and
Kafka's state topics replicated 3 times with min.insync.replicas=2 (`KAFKA_LOCAL_BROKERS=3
dev/kafka-local/kafka-local`). Each case drains a 4-partition topic with 6 consumers (more consumers
than partitions) under `none` and `two-phase-commit`, while one node fails, and must end with nothing
lost, nothing read twice under `two-phase-commit`, and nothing left in the group (Kafka's lag). Under
`none` the records the group delivered again are counted: they are the records whose consumer's
acknowledgement or lock the fault cost (`acknowledgementsFailed`, `locksExpired`).

`make test-cluster` runs every case; `make test` leaves them all to it (they are marked
`cluster_only`): each waits out a node's fault for minutes, and BrokerPauseSuite shows a single paused
broker's locks in `make test`."""

from __future__ import annotations

import math
import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession

from conftest import (
    KAFKA_LOCAL,
    REPO,
    KafkaCluster,
    share_stream,
    source_metrics,
    source_thread_stacks,
    values,
)
from expectations import assert_every_record_once

PARTITIONS = 4
CONSUMERS = 6
RECORDS = 4000
PER_BATCH = 800
LOCK_S = 10
# Each batch takes this long in the sink: records stay held past half a lock, and their locks are
# renewed, while a fault strikes.
BATCH_S = 7
# A drain that outlives this has hung. After the leader of every partition was paused a drain can
# limp, records reaching a poll seconds late and every other batch reading none: on 2 busy cores
# such a drain takes about 330 s (most end within 240 s).
DRAIN_TIMEOUT_S = 420


@dataclass
class ThreeNodes:
    """The three-node cluster, and its nodes' faults."""

    kafka: KafkaCluster

    def run(self, *args: str) -> str:
        env = {**os.environ, "KAFKA_LOCAL_BROKERS": "3"}
        done = subprocess.run([str(KAFKA_LOCAL), *args], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def tool(self, name: str, *args: str) -> str:
        done = subprocess.run(
            [str(REPO / "dev" / "kafka-tool"), name, "--bootstrap-server", self.kafka.bootstrap, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def leader_of(self, topic: str, partition: int) -> int:
        out = self.tool("topics", "--describe", "--topic", topic)
        match = re.search(rf"Partition: {partition}\s+Leader: (\d+)", out)
        assert match, out
        return int(match.group(1))

    def coordinator_of(self, group: str) -> int:
        out = self.tool("share-groups", "--describe", "--group", group, "--state")
        match = re.search(r"\((\d+)\)", out)
        assert match, out
        return int(match.group(1))

    def active_controller(self) -> int:
        out = self.tool("metadata-quorum", "describe", "--status")
        match = re.search(r"LeaderId:\s+(\d+)", out)
        assert match, out
        return int(match.group(1))


@pytest.fixture(scope="module")
def cluster(spark: SparkSession) -> Iterator[ThreeNodes]:
    env = {**os.environ, "KAFKA_LOCAL_BROKERS": "3"}
    started = subprocess.run(
        [str(KAFKA_LOCAL), "start"], capture_output=True, text=True, timeout=600, env=env
    )
    assert started.returncode == 0, started.stderr
    bootstrap = subprocess.run(
        [str(KAFKA_LOCAL), "bootstrap"], capture_output=True, text=True, timeout=60, env=env, check=True
    ).stdout.strip()
    try:
        yield ThreeNodes(
            KafkaCluster(bootstrap, AdminClient({"bootstrap.servers": bootstrap}), spark, replication=3)
        )
    finally:
        subprocess.run([str(KAFKA_LOCAL), "stop"], capture_output=True, timeout=300, env=env)


def drain(
    spark: SparkSession, cluster: ThreeNodes, topic: str, group: str, strategy: str, fault: Callable[[], str]
) -> tuple[list[str], dict[str, str], str]:
    """Drains `topic` with Trigger.AvailableNow into a foreachBatch sink idempotent per batch id, running
    `fault` on a thread of its own once the first batch has records; returns what the sink holds, the
    source's metrics and what the fault did (its return value)."""
    written: dict[int, list[str]] = {}
    started = threading.Event()

    def sink(df: DataFrame, batch_id: int) -> None:
        rows = [r.v for r in df.selectExpr("CAST(value AS STRING) AS v").collect()]
        if rows:
            started.set()
        time.sleep(BATCH_S)
        written[batch_id] = rows

    stream = share_stream(
        spark,
        topic,
        group,
        **{
            "kafka.bootstrap.servers": cluster.kafka.bootstrap,
            "kafka.share.parallelism": str(CONSUMERS),
            "kafka.share.lock.timeout.ms": str(LOCK_S * 1000),
            "kafka.share.exactly.once.strategy": strategy,
            "startingOffsets": "earliest",
            "maxRecordsPerTrigger": str(PER_BATCH),
        },
    )
    query = stream.writeStream.foreachBatch(sink).trigger(availableNow=True).start()
    failure: list[BaseException] = []
    done: list[str] = []

    def inject() -> None:
        try:
            if started.wait(60):
                done.append(fault())
        except BaseException as e:  # reported by the test, not lost on this thread
            failure.append(e)

    injector = threading.Thread(target=inject, daemon=True)
    injector.start()
    try:
        ended = query.awaitTermination(DRAIN_TIMEOUT_S)
        injector.join(120)
        assert not failure, failure
        assert ended, (
            f"the drain did not end within {DRAIN_TIMEOUT_S} s; the sink wrote, by batch id, "
            f"{ {batch: len(rows) for batch, rows in sorted(written.items())} } rows; "
            f"the last progress: {query.lastProgress}; the threads:\n{source_thread_stacks(spark)}"
        )
        assert query.exception() is None, query.exception()
        assert done, (
            "the drain ended before the fault was injected: the first batch had no records within 60 s"
        )
        return [v for rows in written.values() for v in rows], source_metrics(query), done[0]
    finally:
        query.stop()


def assert_drain_loses_nothing(
    spark: SparkSession, cluster: ThreeNodes, topic: str, group: str, strategy: str, fault: Callable[[], str]
) -> None:
    """Drains `topic` through `fault` (see `drain`): every record read, none twice under two-phase-commit,
    none left in the group."""
    got, metrics, what = drain(spark, cluster, topic, group, strategy, fault)
    # Under none a fault can cost records their consumer's acknowledgement or lock: the group delivers
    # exactly those again. two-phase-commit drops their redelivery.
    again = int(metrics.get("acknowledgementsFailed", 0)) + int(metrics.get("locksExpired", 0))
    duplicates = math.inf if strategy == "none" else 0
    repeated = assert_every_record_once(
        values(RECORDS),
        got,
        kafka=cluster.kafka,
        group=group,
        topic=topic,
        allow_duplicates_up_to=duplicates,
        context=what,
    )
    if strategy == "none":
        assert len(repeated) <= again, (
            f"{len(repeated)} read twice, {again} acknowledgements or locks lost: {what}"
        )
    print(
        f"{what} [{strategy}]: {len(got)} read, {len(repeated)} twice, {again} acknowledgements or locks lost"
    )


def new_topic(cluster: ThreeNodes, leader: int | None = None) -> str:
    """A topic of RECORDS records; with `leader`, every partition led by that node (its first replica)."""
    if leader is None:
        topic = cluster.kafka.new_topic(PARTITIONS)
    else:
        topic = f"t-{uuid.uuid4().hex[:10]}"
        others = [n for n in (1, 2, 3) if n != leader]
        assignment = [[leader, *(others if p % 2 == 0 else others[::-1])] for p in range(PARTITIONS)]
        new = NewTopic(topic, num_partitions=PARTITIONS, replication_factor=-1, replica_assignment=assignment)
        cluster.kafka.admin.create_topics([new])[topic].result(timeout=30)
    cluster.kafka.produce(topic, values(RECORDS))
    return topic


STRATEGIES = ["none", "two-phase-commit"]


@pytest.mark.cluster_only
@pytest.mark.parametrize("strategy", ["none", "two-phase-commit"])
def test_the_leader_paused_past_the_lock_then_resumed_loses_nothing_and_the_drain_goes_on(
    spark: SparkSession, cluster: ThreeNodes, group: str, strategy: str
) -> None:
    # Every partition led by the paused node: the locks of every record held are renewed with it.
    node = 1
    topic = new_topic(cluster, leader=node)

    def pause() -> str:
        cluster.run("pause", str(node))
        try:
            time.sleep(2.5 * LOCK_S)
        finally:
            cluster.run("resume", str(node))
        return f"node {node}, leader of every partition, paused {2.5 * LOCK_S:g} s"

    assert_drain_loses_nothing(spark, cluster, topic, group, strategy, pause)
    # The topic, and the share group's state, have a replica on every node: losing one loses nothing.
    for name in (topic, "__share_group_state"):
        described = cluster.tool("topics", "--describe", "--topic", name)
        assert re.search(r"ReplicationFactor: 3\tConfigs: .*min\.insync\.replicas=2", described), described


def restart_after(cluster: ThreeNodes, node: int, down_s: float, stop: str, role: str) -> str:
    """Stops `node` (`stop`: kill or stop-node), starts it again `down_s` later, and says so."""
    cluster.run(stop, str(node))
    time.sleep(down_s)
    cluster.run("start-node", str(node))
    return f"node {node}, {role}, {'SIGKILLed' if stop == 'kill' else 'stopped cleanly'} for {down_s:g} s"


@pytest.mark.cluster_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_leader_killed_and_started_again_loses_nothing(
    spark: SparkSession, cluster: ThreeNodes, group: str, strategy: str
) -> None:
    topic = new_topic(cluster)
    node = cluster.leader_of(topic, 0)

    def kill_leader() -> str:
        return restart_after(cluster, node, 20, "kill", "leader of partition 0")

    assert_drain_loses_nothing(spark, cluster, topic, group, strategy, kill_leader)


@pytest.mark.cluster_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_group_coordinator_killed_and_started_again_loses_nothing(
    spark: SparkSession, cluster: ThreeNodes, group: str, strategy: str
) -> None:
    topic = new_topic(cluster)

    def kill_coordinator() -> str:  # the group has one once its first member joined
        return restart_after(cluster, cluster.coordinator_of(group), 20, "kill", "the group's coordinator")

    assert_drain_loses_nothing(spark, cluster, topic, group, strategy, kill_coordinator)


@pytest.mark.cluster_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_rolling_restart_of_every_node_loses_nothing(
    spark: SparkSession, cluster: ThreeNodes, group: str, strategy: str
) -> None:
    topic = new_topic(cluster)

    def rolling_restart() -> str:
        restarts = []
        for node in (1, 2, 3):
            restarts.append(restart_after(cluster, node, 10, "stop-node", "in a rolling restart"))
            time.sleep(5)  # the node catches up before the next one goes
        return "; ".join(restarts)

    assert_drain_loses_nothing(spark, cluster, topic, group, strategy, rolling_restart)


@pytest.mark.cluster_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_active_controller_killed_fails_over_and_loses_nothing(
    spark: SparkSession, cluster: ThreeNodes, group: str, strategy: str
) -> None:
    topic = new_topic(cluster)

    def kill_controller() -> str:
        return restart_after(cluster, cluster.active_controller(), 20, "kill", "the active controller")

    assert_drain_loses_nothing(spark, cluster, topic, group, strategy, kill_controller)
