"""Errors of the kafka-share source, raised the same way whether Python or the JVM found the problem.

Every error carries a ``condition`` such as ``"KAFKA_SHARE_MISSING_OPTION"`` and a message that
starts with it. The connector checks the options and words the message; this package re-raises it
as one of the classes below::

    try:
        df = read_share_stream(spark, bootstrap_servers="", group_id="g", subscribe="t")
    except KafkaShareConfigurationError as e:
        print(e.condition)  # KAFKA_SHARE_MISSING_OPTION
        print(e)  # [KAFKA_SHARE_MISSING_OPTION] Option 'kafka.bootstrap.servers' is required. ...
"""

from __future__ import annotations

import functools
import json
import re
import zipfile
from pathlib import Path

from pyspark.errors import PySparkException

from . import _bundled_jars

# The connector's conditions, with a message and a SQL state each, as the connector jar carries them.
_CONDITIONS_RESOURCE = "error/kafka-share-error-conditions.json"


class KafkaShareError(Exception):
    """Base class of the errors of this package; ``str(error)`` is ``"[<condition>] <message>"``."""

    def __init__(self, condition: str, message: str) -> None:
        super().__init__(f"[{condition}] {message}")
        self.condition = condition


class KafkaShareConfigurationError(KafkaShareError, ValueError):
    """A missing, invalid or conflicting option, or settings or grants the cluster refuses: fix them and
    start the query again."""


class KafkaShareBrokerUnreachableError(KafkaShareError, ConnectionError):
    """The Kafka cluster did not answer in time: check ``bootstrap_servers`` and the brokers."""


class KafkaShareConnectorNotFoundError(KafkaShareError, RuntimeError):
    """The connector jar is missing from this package or from the Spark session's classpath."""


class KafkaShareAcknowledgementError(KafkaShareError, ValueError):
    """``acknowledge()`` or ``release_or_dead_letter()`` got input it cannot apply: bad columns, records
    not in the batch, ``max_deliveries`` below 1, wrong mode."""


class KafkaShareConnectNotSupportedError(KafkaShareError, NotImplementedError):
    """The call needs a classic Spark session: it uses the driver JVM, which Spark Connect hides."""


# "[CONDITION] message", up to the JVM stack trace PySpark may append.
_JVM_MESSAGE = re.compile(r"\[(KAFKA_SHARE_[A-Z_]+)\] (.*?)(?:\n\nJVM stacktrace:|\Z)", re.DOTALL)

# SQL state classes of conditions the user fixes in the options, the Kafka settings or the cluster's
# grants: 42 (bad or refused request), 22 (bad value), 28 (login refused), and 08 (a client these
# settings cannot connect with; an unanswering cluster has an error of its own).
_CONFIGURATION_SQL_STATE_CLASSES = ("42", "22", "28", "08")


def _error_class(condition: str) -> type[KafkaShareError]:
    """The class of the Python error for a condition of the connector; see :func:`from_jvm_error`."""
    if condition == "KAFKA_SHARE_BROKER_UNREACHABLE":
        return KafkaShareBrokerUnreachableError
    if condition.startswith(("KAFKA_SHARE_ACKNOWLEDGE_", "KAFKA_SHARE_DEAD_LETTER_")):
        return KafkaShareAcknowledgementError
    sql_state = _condition_sql_states().get(condition, "")
    if condition.endswith("_OPTION") or sql_state.startswith(_CONFIGURATION_SQL_STATE_CLASSES):
        return KafkaShareConfigurationError
    return KafkaShareError


@functools.cache
def _condition_sql_states() -> dict[str, str]:
    """Each condition of the connector with its SQL state, read once, when an error first needs it."""
    try:
        conditions = json.loads(_conditions_json())
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return {}  # mapping an error must not raise another: the rules by name still apply
    return {name: str(condition.get("sqlState", "")) for name, condition in conditions.items()}


def _conditions_json() -> str:
    jar = _bundled_jars.bundled_jar().path
    if jar is None or not jar.is_file():
        # A source checkout has no jar in the package until python/build-wheel.sh copies it in.
        checkout = Path(__file__).resolve().parent.parent.parent
        return (checkout / "connector/src/main/resources" / _CONDITIONS_RESOURCE).read_text()
    with zipfile.ZipFile(jar) as archive:
        return archive.read(_CONDITIONS_RESOURCE).decode()


def from_jvm_error(error: BaseException) -> KafkaShareError | None:
    """The Python error for a JVM error that carries a kafka-share condition, else None.

    Handles both a raw ``Py4JJavaError`` and the exceptions PySpark converts JVM errors into
    (``pyspark.errors.IllegalArgumentException`` and the like, classic or Spark Connect).

    The class follows from the condition by rule, not from a list of conditions:
    ``KAFKA_SHARE_BROKER_UNREACHABLE`` is a :class:`KafkaShareBrokerUnreachableError`; the input errors
    of ``acknowledge()`` and ``release_or_dead_letter()`` (``KAFKA_SHARE_ACKNOWLEDGE_*``,
    ``KAFKA_SHARE_DEAD_LETTER_*``) are :class:`KafkaShareAcknowledgementError`; a condition about one
    option (``*_OPTION``) or with a SQL state of class 42, 22, 28 or 08 is a
    :class:`KafkaShareConfigurationError`; any other is a :class:`KafkaShareError`. The SQL states
    are those of ``error/kafka-share-error-conditions.json`` in the connector jar of this package.
    """
    text = _jvm_message(error)
    match = None if text is None else _JVM_MESSAGE.search(text)
    if match is None:
        return None
    condition, message = match.group(1), match.group(2).strip()
    return _error_class(condition)(condition, message)


def _jvm_message(error: BaseException) -> str | None:
    if isinstance(error, PySparkException):
        return str(error)
    try:
        # Imported here: a Spark Connect client (pyspark-client) has no py4j, and no Py4JJavaError either.
        from py4j.protocol import Py4JJavaError
    except ImportError:
        return None
    if isinstance(error, Py4JJavaError):
        return str(error.java_exception.getMessage())
    return None
