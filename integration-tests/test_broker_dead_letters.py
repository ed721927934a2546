"""The broker's dead-letter queue (Kafka 4.4, KIP-1191), set by option kafka.share.dead.letter.topic:
the broker writes each record the group REJECTs, and each past the delivery-count limit, to the
group's dead-letter topic, with Kafka's `__dlq.errors.*` headers; every other record reaches the sink
once, and the group is left with nothing. A cluster without share.version=2 refuses the option as the
query starts, and so does a topic the broker could not write.

Each module fixture starts a broker of its own beside the tests' broker (a Kafka 4.4.0 one, upgraded
to share.version=2, and a Kafka 4.3.1 one), so the module runs in `make test-extended`."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourceType
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_kafka_share import (
    AcknowledgeType,
    KafkaShareAcknowledgementError,
    acknowledge,
    marks,
    release_or_dead_letter,
)

from conftest import (
    REPO,
    ConsumedRecord,
    KafkaCluster,
    acknowledged,
    broker_beside,
    free_port,
    refusal_at_start,
    share_stream,
    values,
)
from expectations import assert_every_record_once
from test_acls import AUTHORIZER, grant_acls
from test_explicit_acknowledgement import run_until
from test_security import PLAIN_LOGIN_MODULE, alice_login

pytestmark = pytest.mark.extended

DLQ_RELEASE = "4.4.0"
EXPLICIT = {"kafka.share.acknowledgment.mode": "explicit", "startingOffsets": "earliest"}
DLQ_HEADERS = ("topic", "partition", "offset", "group", "delivery.count", "message")


@pytest.fixture(scope="module")
def dlq_sasl_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def dlq_broker(tmp_path_factory: pytest.TempPathFactory, dlq_sasl_port: int) -> Iterator[str]:
    """A Kafka 4.4 broker with the dead-letter queues on: kafka-local formats it at share.version=1,
    and the test upgrades it as the user guide says. Its authorizer limits alice, on the SASL
    listener, to what ACLs naming a resource grant her; the tests' own PLAINTEXT clients may do all."""
    authorizer = "\n".join(f"{key}={value}" for key, value in AUTHORIZER.items())
    beside = broker_beside(
        tmp_path_factory,
        KAFKA_BROKER_VERSION=DLQ_RELEASE,
        KAFKA_SASL_PORT=str(dlq_sasl_port),
        KAFKA_LOCAL_BROKER_CONFIG=authorizer,
    )
    for servers in beside:
        upgrade = [str(REPO / "dev" / "kafka-tool"), "features", "--bootstrap-server", servers]
        upgrade += ["upgrade", "--feature", "share.version=2"]
        env = {**os.environ, "KAFKA_BROKER_VERSION": DLQ_RELEASE}
        done = subprocess.run(upgrade, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        yield servers


@pytest.fixture(scope="module")
def kafka44(dlq_broker: str, spark: SparkSession) -> KafkaCluster:
    return KafkaCluster(dlq_broker, AdminClient({"bootstrap.servers": dlq_broker}), spark)


@pytest.fixture(scope="module")
def dlq_sasl(dlq_broker: str, dlq_sasl_port: int) -> str:
    """The Kafka 4.4 broker's SASL_PLAINTEXT listener, where alice logs in with PLAIN."""
    return f"localhost:{dlq_sasl_port}"


@pytest.fixture
def broker_43(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka 4.3 broker, for its one test only."""
    yield from broker_beside(tmp_path_factory, KAFKA_BROKER_VERSION="4.3.1")


def dead_letter_topic(kafka: KafkaCluster, name: str | None = None, enabled: bool = True) -> str:
    """A new topic named `name` (or `dlq.` and a random suffix); with `enabled`, one that lets share
    groups write dead letters to it."""
    name = name or f"dlq.{uuid.uuid4().hex[:10]}"
    config = {"errors.deadletterqueue.group.enable": "true"} if enabled else {}
    kafka.admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config)])[
        name
    ].result(timeout=30)
    return name


class Deliveries:
    """What a `foreachBatch` sink saw of a topic with `poison` values: the values of the other
    records, and each poison record's (partition, offset, deliveryCount), one a delivery."""

    def __init__(self, poison: set[str]) -> None:
        self.poison = poison
        self.processed: list[str] = []
        self.poison_seen: dict[str, list[tuple[int, int, int]]] = {}

    def take(self, batch: DataFrame) -> DataFrame:
        """Records what `batch` (persisted) holds; returns its poison records, which failed."""
        rows = batch.selectExpr("cast(value as string) v", "partition", "offset", "deliveryCount").collect()
        self.processed.extend(r.v for r in rows if r.v not in self.poison)
        for r in rows:
            if r.v in self.poison:
                self.poison_seen.setdefault(r.v, []).append((r.partition, r.offset, r.deliveryCount))
        return batch.filter(F.col("value").cast("string").isin(*self.poison))

    def assert_each_poison_record_came(self, counts: list[int]) -> None:
        """Each poison record came with these delivery counts, in this order, and not once more."""
        assert len(self.poison_seen) == len(self.poison)
        assert all([c for _, _, c in seen] == counts for seen in self.poison_seen.values()), self.poison_seen


def dlq_headers(record: ConsumedRecord) -> tuple[str, int, int, str, int]:
    h = record.headers
    assert set(DLQ_HEADERS) <= {k.removeprefix("__dlq.errors.") for k in h}, h
    return (
        h["__dlq.errors.topic"],
        int(h["__dlq.errors.partition"]),
        int(h["__dlq.errors.offset"]),
        h["__dlq.errors.group"],
        int(h["__dlq.errors.delivery.count"]),
    )


def test_poison_records_the_code_dead_letters_reach_the_brokers_dead_letter_topic(
    spark: SparkSession, kafka44: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(300)
    topic = kafka44.topic_with(expected, partitions=2, key=str)
    dlq = dead_letter_topic(kafka44)
    poison = set(expected[7::50])
    seen = Deliveries(poison)
    refused: list[str] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        batch.persist()
        failed = seen.take(batch)
        if not refused:
            # The source's own copy beside the broker's would dead-letter each record twice.
            with pytest.raises(KafkaShareAcknowledgementError) as twice:
                release_or_dead_letter(batch, failed, max_deliveries=2, dead_letter_topic="dlq.copies")
            refused.append(str(twice.value))
        release_or_dead_letter(batch, failed, max_deliveries=2)
        batch.unpersist()

    options = {
        **EXPLICIT,
        "kafka.share.dead.letter.topic": dlq,
        "kafka.share.dead.letter.copy.record": "true",
    }
    df = share_stream(spark, topic, group, **{"kafka.bootstrap.servers": kafka44.bootstrap, **options})
    # Accepted or rejected: every record, once the broker has applied the last batch's marks.
    run_until(df, sink, lambda m: acknowledged(m) >= len(expected), 180, "the topic drained")

    assert refused[0].startswith("[KAFKA_SHARE_DEAD_LETTER_TOPIC_TWICE]"), refused[0]
    assert "option 'kafka.share.dead.letter.topic'" in refused[0]
    # Each poison record came twice (released once, then rejected), never again.
    seen.assert_each_poison_record_came([1, 2])
    assert_every_record_once(
        [v for v in expected if v not in poison], seen.processed, kafka=kafka44, group=group, topic=topic
    )

    letters = kafka44.consume_all(dlq, expected_count=len(poison), timeout_s=60)
    assert len(letters) == len(poison), [r.value for r in letters]
    # Copied records (errors.deadletterqueue.copy.record.enable=true): the value, and where it came from.
    assert sorted(r.value for r in letters) == sorted(poison)
    for letter in letters:
        partition, offset, _ = seen.poison_seen[letter.value][0]
        assert dlq_headers(letter) == (topic, partition, offset, group, 2), letter.headers
    assert kafka44.group_config(group, "errors.deadletterqueue.topic.name") == dlq
    assert kafka44.group_config(group, "errors.deadletterqueue.copy.record.enable") == "true"


def test_records_past_the_delivery_count_limit_reach_the_brokers_dead_letter_topic(
    spark: SparkSession, kafka44: KafkaCluster, group: str
) -> None:
    expected = values(200)
    topic = kafka44.topic_with(expected, partitions=2, key=str)
    dlq = dead_letter_topic(kafka44)
    kafka44.set_group_config(group, "share.delivery.count.limit", "2")
    poison = set(expected[3::40])
    seen = Deliveries(poison)

    def sink(batch: DataFrame, _batch_id: int) -> None:
        batch.persist()
        failed = seen.take(batch)
        # Released every time: the broker gives up on them after the group's limit of deliveries.
        acknowledge(batch, marks(failed, AcknowledgeType.RELEASE))
        batch.unpersist()

    options = {**EXPLICIT, "kafka.share.dead.letter.topic": dlq}
    df = share_stream(spark, topic, group, **{"kafka.bootstrap.servers": kafka44.bootstrap, **options})
    letters: list[ConsumedRecord] = []

    def all_dead_lettered(metrics: dict[str, str]) -> bool:
        if acknowledged(metrics) < len(expected) - len(poison):
            return False
        letters[:] = kafka44.consume_all(dlq, expected_count=len(poison), timeout_s=1)
        return len(letters) >= len(poison)

    run_until(
        df, sink, all_dead_lettered, 180, "the healthy records accepted and the released ones dead-lettered"
    )

    # Each released record came as often as the limit allows, and not once more.
    seen.assert_each_poison_record_came([1, 2])
    assert_every_record_once(
        [v for v in expected if v not in poison], seen.processed, kafka=kafka44, group=group, topic=topic
    )
    letters = kafka44.consume_all(dlq, expected_count=len(poison))
    assert len(letters) == len(poison)
    # Headers only (errors.deadletterqueue.copy.record.enable keeps Kafka's default, false).
    assert all(r.value == "" for r in letters)
    got = sorted(dlq_headers(r) for r in letters)
    want = sorted((topic, p, o, group, 2) for (p, o, _), *_ in seen.poison_seen.values())
    assert got == want


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        (
            "not enabled",
            "does not let share groups write to it (topic config errors.deadletterqueue.group.enable",
        ),
        ("missing", "does not exist, and the cluster does not create it"),
        ("no prefix", "does not start with 'dlq.', the prefix the cluster requires"),
    ],
)
def test_a_dead_letter_topic_the_broker_could_not_write_is_refused_as_the_query_starts(
    spark: SparkSession, kafka44: KafkaCluster, group: str, tmp_path: Path, problem: str, expected: str
) -> None:
    suffix = uuid.uuid4().hex[:10]
    topic = {
        "not enabled": lambda: dead_letter_topic(kafka44, enabled=False),
        "missing": lambda: f"dlq.missing-{suffix}",
        "no prefix": lambda: dead_letter_topic(kafka44, name=f"letters-{suffix}"),
    }[problem]()
    message = refusal_at_start(
        spark, kafka44.bootstrap, group, tmp_path, **{"kafka.share.dead.letter.topic": topic}
    )
    assert (
        f"[KAFKA_SHARE_BROKER_DLQ_TOPIC_UNUSABLE] Option 'kafka.share.dead.letter.topic' names '{topic}'"
        in message
    ), message
    assert expected in message, message
    # Nothing was set on the group.
    assert kafka44.group_config(group, "errors.deadletterqueue.topic.name") == ""


def test_a_principal_that_may_not_alter_the_groups_configs_is_refused_the_option_saying_so(
    spark: SparkSession, kafka44: KafkaCluster, dlq_sasl: str, group: str, tmp_path: Path
) -> None:
    # What a query that sets no group config needs of the group: READ and DESCRIBE_CONFIGS, not
    # ALTER_CONFIGS (ACLs that name the group leave alice only what they grant there).
    group_rights = (AclOperation.READ, AclOperation.DESCRIBE_CONFIGS)
    grant_acls(kafka44, "User:alice", [(ResourceType.GROUP, group, op) for op in group_rights])
    topic = dead_letter_topic(kafka44)
    login = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": alice_login(PLAIN_LOGIN_MODULE, "alice-secret"),
    }
    message = refusal_at_start(
        spark, dlq_sasl, group, tmp_path, **login, **{"kafka.share.dead.letter.topic": topic}
    )
    assert f"[KAFKA_SHARE_NOT_AUTHORIZED] The Kafka cluster at {dlq_sasl} refused" in message, message
    setting = f"setting errors.deadletterqueue.topic.name of share group '{group}'"
    assert f"{setting} for option 'kafka.share.dead.letter.topic'" in message, message
    assert "READ and ALTER_CONFIGS when options set the group's configs" in message, message
    assert kafka44.group_config(group, "errors.deadletterqueue.topic.name") == ""


def test_the_option_is_refused_on_a_kafka_4_3_broker(
    spark: SparkSession, broker_43: str, group: str, tmp_path: Path
) -> None:
    message = refusal_at_start(
        spark, broker_43, group, tmp_path, **{"kafka.share.dead.letter.topic": "dlq.orders"}
    )
    assert (
        "[KAFKA_SHARE_BROKER_DLQ_UNSUPPORTED] Option 'kafka.share.dead.letter.topic' has the broker write "
        in message
    ), message
    assert f"The Kafka cluster at {broker_43} has share.version 1." in message
    assert f"kafka-features.sh --bootstrap-server {broker_43} upgrade --feature share.version=2" in message
