"""Against the connector itself: a local Spark session with the assembly jar, and for some tests a broker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_kafka_share import (
    KafkaShareBrokerUnreachableError,
    KafkaShareConfigurationError,
    KafkaShareOptions,
    ShareGroupState,
    read_share_stream,
    share_group_state,
    share_group_state_df,
)
from spark_kafka_share._jvm import raising_kafka_share_errors

from .cases import BAD_OPTIONS, STARTING_OFFSETS, VALID

pytestmark = [pytest.mark.jvm, pytest.mark.timeout(120)]


def load_unchecked(spark: SparkSession, options: KafkaShareOptions) -> None:
    """Load with the JVM's checks alone, bypassing Python's."""
    with raising_kafka_share_errors():
        spark.readStream.format("kafka-share").options(**options.to_options()).load()


@pytest.mark.parametrize(("changes", "message"), BAD_OPTIONS)
def test_the_jvm_rejects_bad_options_as_python_does(
    spark: SparkSession, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(KafkaShareConfigurationError) as raised:
        load_unchecked(spark, KafkaShareOptions(**{**VALID, **changes}))
    assert str(raised.value) == message


@pytest.mark.parametrize(("value", "accepted"), STARTING_OFFSETS)
def test_the_jvm_reads_starting_offsets_as_python_does(
    spark: SparkSession, value: str, accepted: bool
) -> None:
    options = KafkaShareOptions(**VALID, starting_offsets=value)
    if accepted:
        load_unchecked(spark, options)
    else:
        with pytest.raises(KafkaShareConfigurationError, match="for option 'startingOffsets'"):
            load_unchecked(spark, options)


def test_read_share_stream_maps_errors_only_the_jvm_finds(spark: SparkSession) -> None:
    with pytest.raises(KafkaShareConfigurationError) as raised:
        read_share_stream(spark, bootstrap_servers="localhost:9092", group_id="g", subscribe_pattern="[")
    assert str(raised.value) == (
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '[' for option 'subscribePattern': "
        "expected a Java regex (Unclosed character class)."
    )


def test_read_share_stream_maps_a_kafka_setting_the_consumer_refuses(spark: SparkSession) -> None:
    with pytest.raises(KafkaShareConfigurationError) as raised:
        read_share_stream(spark, **VALID, kafka_options={"max.poll.records": "many"})
    assert raised.value.condition == "KAFKA_SHARE_INVALID_KAFKA_CONFIG"
    assert "'kafka.max.poll.records'" in str(raised.value)
    assert "many" not in str(raised.value)


def test_read_share_stream_has_the_kafka_share_schema(spark: SparkSession) -> None:
    df = read_share_stream(spark, **VALID, include_headers=True)
    assert df.isStreaming
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>,deliveryCount:int>"
    )


def test_share_group_state_of_an_unreachable_cluster(spark: SparkSession) -> None:
    with pytest.raises(KafkaShareBrokerUnreachableError) as raised:
        share_group_state(spark, "localhost:1", "g", {"default.api.timeout.ms": "2000"})
    assert raised.value.condition == "KAFKA_SHARE_BROKER_UNREACHABLE"
    assert "Could not reach the Kafka cluster at localhost:1 within 2000 ms" in str(raised.value)


@pytest.mark.broker
def test_share_group_state_of_a_group_that_does_not_exist(spark: SparkSession, broker: str) -> None:
    group = f"spark-kafka-share-python-{uuid.uuid4()}"
    assert share_group_state(spark, broker, group) == ShareGroupState(group, False, None, [], [])
    df = share_group_state_df(spark, broker, group)
    assert df.columns == ["topic", "partition", "startOffset", "lag"]
    assert df.count() == 0
