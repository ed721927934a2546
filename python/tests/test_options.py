from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from spark_kafka_share import AcceptPoint, AcknowledgmentMode, KafkaShareConfigurationError, KafkaShareOptions

VALID: dict[str, Any] = {"bootstrap_servers": "localhost:9092", "group_id": "g", "subscribe": "orders"}


@pytest.mark.parametrize(
    ("kafka_options", "message"),
    [
        (
            {"kafka.security.protocol": "SSL"},
            "[KAFKA_SHARE_PREFIXED_KAFKA_OPTION] kafka_options key 'kafka.security.protocol' starts with "
            "'kafka.': give Kafka settings without the prefix, which is added for you "
            "(for example 'security.protocol').",
        ),
        (
            {"Bootstrap.Servers": "elsewhere:9092"},
            "[KAFKA_SHARE_SOURCE_OPTION_IN_KAFKA_OPTIONS] 'Bootstrap.Servers' is an option of the "
            "kafka-share source, not a Kafka client setting: set it with 'bootstrap_servers' instead of "
            "in kafka_options.",
        ),
    ],
)
def test_kafka_options_keys_the_option_map_would_misread_fail_in_python(
    kafka_options: dict[str, str], message: str
) -> None:
    options = KafkaShareOptions(**VALID, kafka_options=kafka_options)
    with pytest.raises(KafkaShareConfigurationError) as raised:
        options.to_options()
    assert str(raised.value) == message


def test_values_go_to_the_connector_unchecked() -> None:
    options = KafkaShareOptions("", "g", parallelism=0, acknowledgment_mode="manual", starting_offsets="soon")
    assert options.to_options() == {
        "kafka.bootstrap.servers": "",
        "kafka.share.group.id": "g",
        "kafka.share.parallelism": "0",
        "kafka.share.acknowledgment.mode": "manual",
        "kafka.share.exactly.once.strategy": "none",
        "includeHeaders": "false",
        "startingOffsets": "soon",
    }


def test_to_options_maps_every_field_to_the_source_option() -> None:
    options = KafkaShareOptions(
        bootstrap_servers="host1:9092",
        group_id="g",
        subscribe=["orders", "refunds"],
        parallelism=4,
        acknowledgment_mode=AcknowledgmentMode.IMPLICIT,
        exactly_once_strategy="idempotent",
        acknowledge=AcceptPoint.AFTER_LOG,
        lock_timeout_ms=15_000,
        partition_max_record_locks=4000,
        assignment_interval_ms=0,
        checkpoint_allow_non_atomic_create=True,
        dead_letter_topic="dlq.orders",
        dead_letter_copy_record=False,
        include_headers=True,
        max_records_per_trigger=1000,
        poll_timeout_ms=250,
        starting_offsets="by_duration:PT1H",
        fetch_offset_num_retries=10,
        kafka_options={"security.protocol": "SSL", "fetch.max.bytes": "1048576"},
    )
    assert options.to_options() == {
        "kafka.bootstrap.servers": "host1:9092",
        "kafka.share.group.id": "g",
        "kafka.security.protocol": "SSL",
        "kafka.fetch.max.bytes": "1048576",
        "subscribe": "orders,refunds",
        "kafka.share.parallelism": "4",
        "kafka.share.acknowledgment.mode": "implicit",
        "kafka.share.exactly.once.strategy": "idempotent",
        "kafka.share.acknowledge": "after-log",
        "kafka.share.lock.timeout.ms": "15000",
        "kafka.share.partition.max.record.locks": "4000",
        "kafka.share.assignment.interval.ms": "0",
        "kafka.share.checkpoint.allow.non.atomic.create": "true",
        "kafka.share.dead.letter.topic": "dlq.orders",
        "kafka.share.dead.letter.copy.record": "false",
        "includeHeaders": "true",
        "maxRecordsPerTrigger": "1000",
        "pollTimeoutMs": "250",
        "startingOffsets": "by_duration:PT1H",
        "fetchOffset.numRetries": "10",
    }


def test_to_options_leaves_unset_options_to_the_source() -> None:
    assert KafkaShareOptions("localhost:9092", "g", subscribe_pattern="orders-.*").to_options() == {
        "kafka.bootstrap.servers": "localhost:9092",
        "kafka.share.group.id": "g",
        "subscribePattern": "orders-.*",
        "kafka.share.acknowledgment.mode": "implicit",
        "kafka.share.exactly.once.strategy": "none",
        "includeHeaders": "false",
    }


@pytest.mark.parametrize(
    ("delta", "iso"),
    [
        (datetime.timedelta(minutes=30), "PT1800S"),
        (datetime.timedelta(days=1, milliseconds=500), "PT86400.500000S"),
        (datetime.timedelta(0), "PT0S"),
        (datetime.timedelta(seconds=-0.5), "-PT0.500000S"),  # for the connector to reject
    ],
)
def test_starting_offsets_timedelta_becomes_an_iso_duration(delta: datetime.timedelta, iso: str) -> None:
    assert KafkaShareOptions(**VALID, starting_offsets=delta).to_options()["startingOffsets"] == iso


def test_options_are_immutable() -> None:
    options = KafkaShareOptions(**VALID)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.group_id = "other"  # type: ignore[misc]


def test_repr_leaves_out_kafka_settings_which_may_hold_secrets() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="s3cret";'
    secret = {"sasl.jaas.config": jaas}
    options = KafkaShareOptions("localhost:9092", "g", subscribe="t", kafka_options=secret)
    assert "s3cret" not in repr(options)
    assert "s3cret" not in str(options)
    assert options.to_options()["kafka.sasl.jaas.config"] == jaas  # still passed to the source
