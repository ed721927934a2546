"""Errors of the kafka-share source, raised the same way whether Python or the JVM found the problem.

Every error carries a ``condition`` such as ``"KAFKA_SHARE_MISSING_OPTION"`` and a message that
starts with it, worded exactly as the connector words it on the JVM::

    try:
        df = read_share_stream(spark, bootstrap_servers="", group_id="g", subscribe="t")
    except KafkaShareConfigurationError as e:
        print(e.condition)  # KAFKA_SHARE_MISSING_OPTION
        print(e)  # [KAFKA_SHARE_MISSING_OPTION] Option 'kafka.bootstrap.servers' is required. ...
"""

from __future__ import annotations

import re

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException


class KafkaShareError(Exception):
    """Base class of the errors of this package; ``str(error)`` is ``"[<condition>] <message>"``."""

    def __init__(self, condition: str, message: str) -> None:
        super().__init__(f"[{condition}] {message}")
        self.condition = condition


class KafkaShareConfigurationError(KafkaShareError, ValueError):
    """A missing, invalid or conflicting option: fix the options and start the query again."""


class KafkaShareBrokerUnreachableError(KafkaShareError, ConnectionError):
    """The Kafka cluster did not answer in time: check ``bootstrap_servers`` and the brokers."""


class KafkaShareConnectorNotFoundError(KafkaShareError, RuntimeError):
    """The connector jar is missing from this package or from the Spark session's classpath."""


class KafkaShareAcknowledgementError(KafkaShareError, ValueError):
    """``acknowledge()`` or ``release_or_dead_letter()`` got input it cannot apply: bad columns, records
    not in the batch, ``max_deliveries`` below 1, wrong mode."""


class KafkaShareConnectNotSupportedError(KafkaShareError, NotImplementedError):
    """The call needs a classic Spark session: it uses the driver JVM, which Spark Connect hides."""


# The JVM's conditions for bad options (raised as IllegalArgumentException there), for a Kafka
# client that the settings the options pass to Kafka do not let it create, and for a login or an
# action the cluster refuses.
_CONFIGURATION_CONDITIONS = frozenset(
    {
        "KAFKA_SHARE_MISSING_OPTION",
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "KAFKA_SHARE_INVALID_KAFKA_CONFIG",
        "KAFKA_SHARE_CONFLICTING_OPTIONS",
        "KAFKA_SHARE_NO_SUBSCRIPTION",
        "KAFKA_SHARE_OWNED_KAFKA_CONFIG",
        "KAFKA_SHARE_UNSUPPORTED_OPTION",
        "KAFKA_SHARE_CLIENT_NOT_CREATED",
        "KAFKA_SHARE_AUTHENTICATION_FAILED",
        "KAFKA_SHARE_NOT_AUTHORIZED",
    }
)

_ACKNOWLEDGEMENT_CONDITIONS = frozenset(
    {
        "KAFKA_SHARE_ACKNOWLEDGE_NEEDS_EXPLICIT_MODE",
        "KAFKA_SHARE_ACKNOWLEDGE_NOT_A_SHARE_BATCH",
        "KAFKA_SHARE_ACKNOWLEDGE_INVALID_MARKS",
        "KAFKA_SHARE_ACKNOWLEDGE_RECORD_NOT_IN_BATCH",
        "KAFKA_SHARE_DEAD_LETTER_INVALID_INPUT",
    }
)

# "[CONDITION] message", up to the JVM stack trace PySpark may append.
_JVM_MESSAGE = re.compile(r"\[(KAFKA_SHARE_[A-Z_]+)\] (.*?)(?:\n\nJVM stacktrace:|\Z)", re.DOTALL)


def from_jvm_error(error: BaseException) -> KafkaShareError | None:
    """The Python error for a JVM error that carries a kafka-share condition, else None.

    Handles both a raw ``Py4JJavaError`` and the exceptions PySpark converts JVM errors into
    (``pyspark.errors.IllegalArgumentException`` and the like, classic or Spark Connect).
    """
    if isinstance(error, Py4JJavaError):
        text = str(error.java_exception.getMessage())
    elif isinstance(error, PySparkException):
        text = str(error)
    else:
        return None
    match = _JVM_MESSAGE.search(text)
    if match is None:
        return None
    condition, message = match.group(1), match.group(2).strip()
    if condition in _CONFIGURATION_CONDITIONS:
        return KafkaShareConfigurationError(condition, message)
    if condition in _ACKNOWLEDGEMENT_CONDITIONS:
        return KafkaShareAcknowledgementError(condition, message)
    if condition == "KAFKA_SHARE_BROKER_UNREACHABLE":
        return KafkaShareBrokerUnreachableError(condition, message)
    return KafkaShareError(condition, message)
