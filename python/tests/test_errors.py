from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import IllegalArgumentException, PySparkException

import spark_kafka_share
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


@pytest.fixture(autouse=True)
def conditions_read_afresh() -> Iterator[None]:
    """The package reads the connector's conditions once; each test here reads them from its own jar."""
    spark_kafka_share.errors._condition_sql_states.cache_clear()
    yield
    spark_kafka_share.errors._condition_sql_states.cache_clear()


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


# One condition of the connector for each branch of the rule, with the class it maps to.
@pytest.mark.parametrize(
    ("condition", "error_class"),
    [
        ("KAFKA_SHARE_INVALID_KAFKA_CONFIG", KafkaShareConfigurationError),  # SQL state 42616
        ("KAFKA_SHARE_AUTHENTICATION_FAILED", KafkaShareConfigurationError),  # 28000
        ("KAFKA_SHARE_CLIENT_NOT_CREATED", KafkaShareConfigurationError),  # 08001
        ("KAFKA_SHARE_UNSUPPORTED_OPTION", KafkaShareConfigurationError),  # 0A000, about one option
        ("KAFKA_SHARE_ACKNOWLEDGE_NEEDS_EXPLICIT_MODE", KafkaShareAcknowledgementError),
        ("KAFKA_SHARE_DEAD_LETTER_INVALID_INPUT", KafkaShareAcknowledgementError),
        ("KAFKA_SHARE_DEAD_LETTERS_NOT_SENT", KafkaShareError),  # 55000
        ("KAFKA_SHARE_GROUPS_DISABLED", KafkaShareError),  # 0A000
    ],
)
def test_the_class_follows_from_the_condition_and_its_sql_state(
    condition: str, error_class: type[KafkaShareError]
) -> None:
    error = from_jvm_error(IllegalArgumentException(message=f"[{condition}] Something is wrong."))
    assert type(error) is error_class
    assert error.condition == condition


def bundle_jar(monkeypatch: pytest.MonkeyPatch, jar: Path, conditions: dict[str, object] | None) -> None:
    """Make ``jar`` the package's connector jar, carrying ``conditions`` as its condition file."""
    with zipfile.ZipFile(jar, "w") as archive:
        if conditions is not None:
            archive.writestr("error/kafka-share-error-conditions.json", json.dumps(conditions))
    monkeypatch.setattr(spark_kafka_share._bundled_jars, "_JARS_DIR", jar.parent)


def test_sql_states_come_from_the_bundled_connector_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conditions = {"KAFKA_SHARE_NEW_LIMIT": {"message": ["Too big: <value>."], "sqlState": "22003"}}
    bundle_jar(monkeypatch, tmp_path / "spark-kafka-share-spark4_2.13.jar", conditions)
    error = from_jvm_error(py4j_error("[KAFKA_SHARE_NEW_LIMIT] Too big: 7."))
    assert isinstance(error, KafkaShareConfigurationError)
    assert str(error) == "[KAFKA_SHARE_NEW_LIMIT] Too big: 7."


def test_a_jar_without_the_conditions_leaves_the_rules_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle_jar(monkeypatch, tmp_path / "spark-kafka-share-spark4_2.13.jar", None)
    assert isinstance(from_jvm_error(py4j_error(MISSING_GROUP)), KafkaShareConfigurationError)
    assert isinstance(from_jvm_error(py4j_error(UNREACHABLE)), KafkaShareBrokerUnreachableError)
    unknown_sql_state = from_jvm_error(py4j_error("[KAFKA_SHARE_INVALID_KAFKA_CONFIG] Kafka setting ..."))
    assert type(unknown_sql_state) is KafkaShareError
