"""What the package needs from the driver JVM, and how it tells a classic session from Spark Connect."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

from .errors import KafkaShareConnectNotSupportedError, KafkaShareConnectorNotFoundError, from_jvm_error

SOURCE_PROVIDER_CLASS = "io.github.sparkkafkashare.KafkaShareSourceProvider"


def is_connect_session(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (``pyspark.sql.connect.session.SparkSession``).

    Judged by the class's module, so that a classic session never imports the Connect client
    (which needs pandas, pyarrow and grpcio).
    """
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def require_classic_session(spark: SparkSession, what: str, why: str, instead: str) -> None:
    """Raise KafkaShareConnectNotSupportedError if ``spark`` is a Spark Connect session."""
    if is_connect_session(spark):
        raise KafkaShareConnectNotSupportedError(
            "KAFKA_SHARE_CLASSIC_SESSION_REQUIRED",
            f"{what} needs a classic Spark session: {why}, which a Spark Connect client cannot reach. "
            + instead,
        )


def driver_jvm(spark: SparkSession) -> Any:
    """The Py4J view of a classic session's driver JVM."""
    jvm = spark._jvm
    assert jvm is not None, "a classic SparkSession always has a JVM"
    return jvm


def require_connector(spark: SparkSession) -> None:
    """Raise KafkaShareConnectorNotFoundError if the classic session's JVM cannot load the connector."""
    # Imported here: only a classic session needs py4j, which a Spark Connect client may not have.
    from py4j.protocol import Py4JJavaError

    jvm = driver_jvm(spark)
    try:
        jvm.java.lang.Class.forName(
            SOURCE_PROVIDER_CLASS, False, jvm.java.lang.Thread.currentThread().getContextClassLoader()
        )
    except Py4JJavaError as e:
        raise KafkaShareConnectorNotFoundError(
            "KAFKA_SHARE_CONNECTOR_NOT_LOADED",
            f"The kafka-share connector ({SOURCE_PROVIDER_CLASS}) is not on this Spark session's classpath. "
            "Create the session with configure_spark_with_kafka_share(SparkSession.builder).getOrCreate() "
            "before any other session or SparkContext starts in this process, or start Spark with "
            "--jars <spark_kafka_share.jar_path()>.",
        ) from e


@contextmanager
def raising_kafka_share_errors() -> Iterator[None]:
    """Re-raise JVM errors that carry a kafka-share condition as this package's errors."""
    try:
        yield
    except Exception as e:
        mapped = from_jvm_error(e)
        if mapped is None:
            raise
        raise mapped from e
