from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from spark_kafka_share import (
    AcknowledgmentMode,
    ExactlyOnceStrategy,
    KafkaShareConfigurationError,
    KafkaShareOptions,
)

from .cases import BAD_OPTIONS, PYTHON_ONLY_BAD_OPTIONS, STARTING_OFFSETS, VALID


@pytest.mark.parametrize(("changes", "message"), BAD_OPTIONS + PYTHON_ONLY_BAD_OPTIONS)
def test_validate_rejects_bad_options_with_the_connectors_message(
    changes: dict[str, Any], message: str
) -> None:
    options = KafkaShareOptions(**{**VALID, **changes})
    with pytest.raises(KafkaShareConfigurationError) as raised:
        options.validate()
    assert str(raised.value) == message
    assert raised.value.condition == message[1 : message.index("]")]


def test_configuration_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="KAFKA_SHARE_NO_SUBSCRIPTION"):
        KafkaShareOptions("localhost:9092", "g").validate()


@pytest.mark.parametrize(("value", "accepted"), STARTING_OFFSETS)
def test_starting_offsets_accepts_what_java_duration_parse_accepts(value: str, accepted: bool) -> None:
    options = KafkaShareOptions(**VALID, starting_offsets=value)
    if accepted:
        options.validate()
    else:
        with pytest.raises(KafkaShareConfigurationError, match="for option 'startingOffsets'"):
            options.validate()


def test_validate_accepts_every_supported_setting() -> None:
    KafkaShareOptions(
        bootstrap_servers="host1:9092,host2:9092",
        group_id="orders-processor",
        subscribe_pattern="[",  # a bad Java regex: only the JVM can tell
        parallelism=2**31 - 1,
        acknowledgment_mode="Implicit",
        exactly_once_strategy=ExactlyOnceStrategy.IDEMPOTENT,
        lock_timeout_ms=30_000,
        partition_max_record_locks=2**31 - 1,
        assignment_interval_ms=0,
        include_headers=True,
        max_records_per_trigger=2**63 - 1,
        poll_timeout_ms=500,
        starting_offsets=datetime.timedelta(minutes=30),
        fetch_offset_num_retries=0,
        kafka_options={"security.protocol": "SSL", "default.api.timeout.ms": "+5000"},
    ).validate()


def test_to_options_maps_every_field_to_the_source_option() -> None:
    options = KafkaShareOptions(
        bootstrap_servers="host1:9092",
        group_id="g",
        subscribe=["orders", "refunds"],
        parallelism=4,
        acknowledgment_mode=AcknowledgmentMode.IMPLICIT,
        exactly_once_strategy="idempotent",
        lock_timeout_ms=15_000,
        partition_max_record_locks=4000,
        assignment_interval_ms=0,
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
        "kafka.share.lock.timeout.ms": "15000",
        "kafka.share.partition.max.record.locks": "4000",
        "kafka.share.assignment.interval.ms": "0",
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
        (datetime.timedelta(seconds=-0.5), "-PT0.500000S"),
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
