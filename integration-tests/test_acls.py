"""The ACLs the source needs, against the local broker with Kafka's StandardAuthorizer, started with
it for this module only: with an authorizer, Kafka 4.3.1 fails a whole ShareAcknowledge request that
names a deleted topic (a NullPointerException in its authorization of the request's topics), where
without one it fails only that topic's part, and other tests rely on the latter.
Users log in as alice on the SASL_PLAINTEXT listener (test_security.py); PLAINTEXT clients, the
tests' own, are super users."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from pyspark.sql import SparkSession
from spark_kafka_share import KafkaShareConfigurationError, from_jvm_error

from conftest import (
    KILLED_DRIVER_LOCKS,
    KafkaCluster,
    drain_in_session,
    drain_values,
    drained_rows,
    local_broker,
    run_drain_job,
    values,
)
from expectations import assert_every_record_once
from test_explicit_acknowledgement import DeadLetteringDrain
from test_security import PLAIN_LOGIN_MODULE, SASL_BOOTSTRAP, alice_login, failure_of, sasl_stream

# A SASL user may do anything on a resource no ACL names, so a grant on a topic or group limits alice
# to what it grants there.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture(scope="module", autouse=True)
def authorizer() -> Iterator[None]:
    local_broker("restart", AUTHORIZER)
    yield
    local_broker("restart")


Acl = tuple[ResourceType, str, AclOperation]


def grant_acls(kafka: KafkaCluster, principal: str, entries: list[Acl]) -> list[AclBinding]:
    """Grants `principal` ACLs (ALLOW, literal names) on `kafka`; the bindings made."""
    bindings = [
        AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for kind, name, op in entries
    ]
    for future in kafka.admin.create_acls(bindings).values():
        future.result(timeout=30)
    return bindings


@pytest.fixture
def acls(kafka: KafkaCluster) -> Iterator[Callable[[str, list[Acl]], None]]:
    """Grants ACLs (ALLOW, literal names) for one test, and removes them after it."""
    made: list[AclBinding] = []

    def grant(principal: str, entries: list[Acl]) -> None:
        made.extend(grant_acls(kafka, principal, entries))

    yield grant
    filters = [
        AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
        )
        for b in dict.fromkeys(made)  # a test may grant one ACL again, after revoking it
    ]
    if filters:
        for future in kafka.admin.delete_acls(filters).values():
            future.result(timeout=30)


def revoke(kafka: KafkaCluster, principal: str, entries: list[Acl]) -> None:
    """Takes back ACLs that `acls` granted, within the test."""
    filters = [
        AclBindingFilter(kind, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for kind, name, op in entries
    ]
    for future in kafka.admin.delete_acls(filters).values():
        future.result(timeout=30)


def alice_admin() -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": SASL_BOOTSTRAP,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
    )


# The ACLs the user guide ("ACLs") lists, for a query whose options set no group config, and for one
# whose options do (here startingOffsets, on a new group).
LEAST_ACLS = {
    "group-configs-set-by-the-operator": (
        [(ResourceType.GROUP, AclOperation.READ), (ResourceType.GROUP, AclOperation.DESCRIBE_CONFIGS)],
        False,
    ),
    "group-configs-set-by-options": (
        [(ResourceType.GROUP, AclOperation.READ), (ResourceType.GROUP, AclOperation.ALTER_CONFIGS)],
        True,
    ),
}


@pytest.mark.parametrize("case", list(LEAST_ACLS))
def test_a_query_reads_with_only_the_acls_the_user_guide_lists(
    spark: SparkSession, kafka: KafkaCluster, group: str, acls: Callable[[str, list[Acl]], None], case: str
) -> None:
    group_acls, options_set_configs = LEAST_ACLS[case]
    topic = kafka.topic_with(values(300), partitions=2)
    acls(
        "User:alice",
        [(ResourceType.TOPIC, topic, AclOperation.READ)] + [(k, group, op) for k, op in group_acls],
    )
    # An ACL on the cluster for someone else: alice may then do nothing there, which the source needs not.
    acls("User:nobody", [(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)])
    broker = ConfigResource(ResourceType.BROKER, "1")
    alice = alice_admin()  # held: the future fails if its client is collected first
    with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
        alice.describe_configs([broker])[broker].result(timeout=30)
    if not options_set_configs:
        kafka.set_group_config(group, "share.auto.offset.reset", "earliest")
    df = sasl_stream(spark, topic, group, "alice-secret", "earliest" if options_set_configs else None)
    assert_every_record_once(values(300), drain_values(spark, df), kafka=kafka, group=group, topic=topic)


# ACLs short of the least set; the refusal comes from the driver's Admin calls or from the executors'
# share consumers. A grant that names a resource leaves alice only what it grants there (the group
# is named, for "nothing-on-the-group", by an ACL for another principal).
MISSING_ACL = {
    # DESCRIBE lets the driver's Admin calls through: the share consumers meet the refusal.
    "no-read-on-the-group": [
        (ResourceType.TOPIC, AclOperation.READ),
        (ResourceType.GROUP, AclOperation.DESCRIBE),
        (ResourceType.GROUP, AclOperation.ALTER_CONFIGS),
    ],
    "nothing-on-the-group": [(ResourceType.TOPIC, AclOperation.READ)],
    "no-read-on-the-topic": [
        (ResourceType.TOPIC, AclOperation.DESCRIBE),
        (ResourceType.GROUP, AclOperation.READ),
        (ResourceType.GROUP, AclOperation.ALTER_CONFIGS),
    ],
    "no-configs-on-the-group": [
        (ResourceType.TOPIC, AclOperation.READ),
        (ResourceType.GROUP, AclOperation.READ),
    ],
}


@pytest.mark.parametrize("case", list(MISSING_ACL))
def test_a_principal_missing_an_acl_fails_the_query_saying_which_acls_it_needs(
    spark: SparkSession, kafka: KafkaCluster, group: str, acls: Callable[[str, list[Acl]], None], case: str
) -> None:
    # Without READ on the group, Kafka's client ends the membership and throws the refusal once; a
    # retried task then reads nothing, and the query must fail rather than run on reading nothing.
    topic = kafka.topic_with(values(100), partitions=2)
    acls(
        "User:alice",
        [(kind, topic if kind == ResourceType.TOPIC else group, op) for kind, op in MISSING_ACL[case]],
    )
    acls("User:nobody", [(ResourceType.GROUP, group, AclOperation.READ)])
    failure = failure_of(sasl_stream(spark, topic, group, "alice-secret"))
    message = str(failure)
    assert f"[KAFKA_SHARE_NOT_AUTHORIZED] The Kafka cluster at {SASL_BOOTSTRAP} refused" in message, message
    assert "AuthorizationException" in message, message
    assert "READ on each topic the query reads; READ and DESCRIBE_CONFIGS on the share group" in message
    assert isinstance(from_jvm_error(failure), KafkaShareConfigurationError)
    assert kafka.total_lag(group) in (None, 100), "the query read nothing"


# Short of WRITE on the dead-letter topic: alice may not see it at all, or may see it but not write.
DEAD_LETTER_ACLS: dict[str, list[AclOperation]] = {
    "nothing-on-the-dead-letter-topic": [],
    "describe-only-on-the-dead-letter-topic": [AclOperation.DESCRIBE],
}


@pytest.mark.parametrize("case", list(DEAD_LETTER_ACLS))
def test_dead_lettering_without_write_on_the_dead_letter_topic_fails_the_batch_and_loses_nothing(
    spark: SparkSession,
    kafka: KafkaCluster,
    group: str,
    acls: Callable[[str, list[Acl]], None],
    tmp_path: Path,
    case: str,
) -> None:
    topic = kafka.new_topic(partitions=2)
    dead_letters = kafka.new_topic()
    expected = values(100)
    kafka.produce(topic, expected)
    acls(
        "User:alice",
        [
            (ResourceType.TOPIC, topic, AclOperation.READ),
            (ResourceType.GROUP, group, AclOperation.READ),
            (ResourceType.GROUP, group, AclOperation.ALTER_CONFIGS),
        ]
        + [(ResourceType.TOPIC, dead_letters, op) for op in DEAD_LETTER_ACLS[case]],
    )
    # ACLs for someone else on the dead-letter topic and on the cluster, which leave alice only what
    # she is granted there: the producer's idempotent writes need nothing on the cluster.
    acls(
        "User:nobody",
        [
            (ResourceType.TOPIC, dead_letters, AclOperation.WRITE),
            (ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        ],
    )
    explicit = {"kafka.share.acknowledgment.mode": "explicit"}
    drain = DeadLetteringDrain(
        lambda: sasl_stream(spark, topic, group, "alice-secret", **explicit),
        tmp_path / "checkpoint",
        topic,
        expected,
        dead_letters,
    )

    message = drain.failure()
    assert f"[KAFKA_SHARE_NOT_AUTHORIZED] The Kafka cluster at {SASL_BOOTSTRAP} refused" in message, message
    refused = f"records to the dead-letter topic '{dead_letters}'): TopicAuthorizationException"
    assert refused in message, message
    assert "WRITE on the dead-letter topic that release_or_dead_letter() names" in message

    # The refused copies rejected nothing: with WRITE, the query picks the records up again.
    acls("User:alice", [(ResourceType.TOPIC, dead_letters, AclOperation.WRITE)])
    assert drain.run()
    drain.assert_each_processed_or_dead_lettered_once(kafka, group)


def test_a_batch_to_re_run_that_the_principal_may_no_longer_read_fails_saying_so_and_runs_once_it_may(
    kafka: KafkaCluster, group: str, acls: Callable[[str, list[Acl]], None], tmp_path: Path
) -> None:
    # Under two-phase-commit the restart reads the killed batch back with a consumer of its own, which
    # met a refusal with Kafka's raw exception, under the shaded class name.
    expected = values(1_000)
    topic = kafka.topic_with(expected)
    read_topic: Acl = (ResourceType.TOPIC, topic, AclOperation.READ)
    acls(
        "User:alice",
        [
            read_topic,
            (ResourceType.GROUP, group, AclOperation.READ),
            (ResourceType.GROUP, group, AclOperation.ALTER_CONFIGS),
        ],
    )
    login = alice_login(PLAIN_LOGIN_MODULE, "alice-secret")
    as_alice = [f"kafka.bootstrap.servers={SASL_BOOTSTRAP}", "kafka.security.protocol=SASL_PLAINTEXT"]
    as_alice += ["kafka.sasl.mechanism=PLAIN", f"kafka.sasl.jaas.config={login}"]
    job = ["--strategy", "two-phase-commit", *(arg for option in as_alice for arg in ("--option", option))]
    job += KILLED_DRIVER_LOCKS
    assert run_drain_job(topic, group, tmp_path, *job, "--kill-at", "sink-written") != 0
    assert json.loads((tmp_path / "out" / "killed.json").read_text()), "killed before the sink saw a record"

    # DESCRIBE lets the driver's Admin calls through: the read-back meets the refusal.
    revoke(kafka, "User:alice", [read_topic])
    acls("User:alice", [(ResourceType.TOPIC, topic, AclOperation.DESCRIBE)])
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) != 0
    failure = (tmp_path / "out" / "failure.txt").read_text()
    assert f"[KAFKA_SHARE_NOT_AUTHORIZED] The Kafka cluster at {SASL_BOOTSTRAP} refused" in failure, failure
    read_back = r"\(reading back \d+ records of slot \d+ to re-run the batch of round \d+\)"
    read_back += ": TopicAuthorizationException"
    assert re.search(read_back, failure), failure

    acls("User:alice", [read_topic])
    assert drain_in_session(kafka.spark, topic, group, tmp_path, *job) == 0
    rows = drained_rows(tmp_path)  # the restart re-ran the killed batch id: its last write counts
    assert_every_record_once(expected, [value for value, _ in rows], kafka=kafka, group=group, topic=topic)
