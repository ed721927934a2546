from __future__ import annotations

import pytest
from pyspark.errors import IllegalArgumentException, PySparkException

from spark_kafka_share import (
    KafkaShareAcknowledgementError,
    KafkaShareBrokerUnreachableError,
    KafkaShareConfigurationError,
    KafkaShareError,
    from_jvm_error,
)
from spark_kafka_share._jvm import raising_kafka_share_errors

from .fakes import py4j_error

MISSING_GROUP = (
    "[KAFKA_SHARE_MISSING_OPTION] Option 'kafka.share.group.id' is required. "
    "Set it to the share group this query consumes as; queries with the same group split the records."
)
UNREACHABLE = (
    "[KAFKA_SHARE_BROKER_UNREACHABLE] Could not reach the Kafka cluster at localhost:1 within 2000 ms while "
    "describing share group 'g': TimeoutException: Timed out waiting for a node assignment. Check option "
    "'kafka.bootstrap.servers' and that the brokers are running; raise 'kafka.default.api.timeout.ms' if "
    "the cluster is slow to answer."
)


def test_an_illegal_argument_from_load_becomes_a_configuration_error() -> None:
    error = from_jvm_error(IllegalArgumentException(message=MISSING_GROUP))
    assert isinstance(error, KafkaShareConfigurationError)
    assert isinstance(error, ValueError)
    assert error.condition == "KAFKA_SHARE_MISSING_OPTION"
    assert str(error) == MISSING_GROUP


def test_the_jvm_stack_trace_is_left_out() -> None:
    error = from_jvm_error(
        IllegalArgumentException(message=MISSING_GROUP + "\n\nJVM stacktrace:\n\tat x.y(Z)")
    )
    assert str(error) == MISSING_GROUP


def test_an_unreachable_cluster_becomes_a_connection_error() -> None:
    error = from_jvm_error(py4j_error(UNREACHABLE))
    assert isinstance(error, KafkaShareBrokerUnreachableError)
    assert isinstance(error, ConnectionError)
    assert str(error) == UNREACHABLE


def test_a_failed_query_keeps_its_condition() -> None:
    message = "Query q [id = 1, runId = 2] terminated with exception: " + UNREACHABLE
    error = from_jvm_error(PySparkException(message=message))
    assert isinstance(error, KafkaShareBrokerUnreachableError)


def test_other_conditions_become_the_base_error() -> None:
    message = "[KAFKA_SHARE_GROUPS_DISABLED] The Kafka cluster at localhost:9092 does not have share groups."
    error = from_jvm_error(py4j_error(message))
    assert type(error) is KafkaShareError
    assert error.condition == "KAFKA_SHARE_GROUPS_DISABLED"


@pytest.mark.parametrize(
    "error",
    [
        py4j_error("java.lang.ClassNotFoundException: x"),
        py4j_error(None),
        IllegalArgumentException(message="[INVALID_OPTION] something else"),
        ValueError(MISSING_GROUP),
    ],
)
def test_errors_of_others_are_not_mapped(error: BaseException) -> None:
    assert from_jvm_error(error) is None


def test_raising_kafka_share_errors_maps_ours_and_passes_on_the_rest() -> None:
    original = IllegalArgumentException(message=MISSING_GROUP)
    with pytest.raises(KafkaShareConfigurationError) as raised, raising_kafka_share_errors():
        raise original
    assert raised.value.__cause__ is original

    other = IllegalArgumentException(message="[INVALID_OPTION] something else")
    with pytest.raises(IllegalArgumentException) as passed, raising_kafka_share_errors():
        raise other
    assert passed.value is other


def test_acknowledgement_conditions_become_acknowledgement_errors() -> None:
    message = (
        "[KAFKA_SHARE_ACKNOWLEDGE_RECORD_NOT_IN_BATCH] Records marked for acknowledgement are not in this "
        "batch: orders-0@12."
    )
    error = from_jvm_error(IllegalArgumentException(message=message))
    assert isinstance(error, KafkaShareAcknowledgementError)
    assert isinstance(error, ValueError)
    assert str(error) == message
