"""Against the connector itself: a local Spark session with the assembly jar, and for some tests a broker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_kafka_share import (
    KafkaShareBrokerUnreachableError,
    KafkaShareConfigurationError,
    ShareGroupState,
    read_share_stream,
    share_group_state,
    share_group_state_df,
)

pytestmark = [pytest.mark.jvm, pytest.mark.timeout(120)]

VALID: dict[str, Any] = {"bootstrap_servers": "localhost:9092", "group_id": "g", "subscribe": "orders"}


def test_read_share_stream_raises_the_connectors_option_errors_as_configuration_errors(
    spark: SparkSession,
) -> None:
    with pytest.raises(KafkaShareConfigurationError) as raised:
        read_share_stream(spark, bootstrap_servers="localhost:9092", group_id="g")
    assert str(raised.value) == (
        "[KAFKA_SHARE_NO_SUBSCRIPTION] One of the options 'subscribe' (a comma-separated list of topics) "
        "or 'subscribePattern' (a Java regex of topic names) is required."
    )


def test_read_share_stream_has_the_kafka_share_schema(spark: SparkSession) -> None:
    df = read_share_stream(spark, **VALID, include_headers=True)
    assert df.isStreaming
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>,deliveryCount:int>"
    )


def test_share_group_state_raises_the_connectors_option_errors_as_configuration_errors(
    spark: SparkSession,
) -> None:
    with pytest.raises(KafkaShareConfigurationError) as raised:
        share_group_state(spark, "localhost:9092", " ")
    assert raised.value.condition == "KAFKA_SHARE_MISSING_OPTION"
    assert "Option 'kafka.share.group.id' is required" in str(raised.value)


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
