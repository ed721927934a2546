"""Spark's real-time trigger (Spark 4.1 and later), on every PySpark that has real-time mode."""

from __future__ import annotations

import inspect
from typing import Any

from pyspark.sql.streaming.readwriter import DataStreamWriter

from ._jvm import driver_jvm, raising_kafka_share_errors, require_classic_session

DEFAULT_BATCH_DURATION = "5 minutes"


def real_time_trigger(
    writer: DataStreamWriter, batch_duration: str = DEFAULT_BATCH_DURATION
) -> DataStreamWriter:
    """Sets Spark's real-time trigger on ``writer``, as ``writer.trigger(realTime=batch_duration)`` does
    on PySpark 4.2 and later; PySpark 4.1 has real-time mode but not that argument. ``batch_duration``
    is how long each batch runs (its checkpoint interval), at least 5 seconds.

    Raises:
        KafkaShareError: ``KAFKA_SHARE_REAL_TIME_NEEDS_SPARK`` on Spark 3.5 and 4.0, which have no
            real-time mode.
        KafkaShareConnectNotSupportedError: on a Spark Connect session before PySpark 4.2.
    """
    trigger: Any = writer.trigger  # typed without realTime where its stubs predate it
    if "realTime" in inspect.signature(trigger).parameters:
        with_trigger: DataStreamWriter = trigger(realTime=batch_duration)
        return with_trigger
    spark = writer._spark
    require_classic_session(
        spark,
        "A real-time trigger on this PySpark",
        "it sets Spark's trigger through the driver JVM",
        "Use PySpark 4.2 or later, whose trigger() takes realTime.",
    )
    with raising_kafka_share_errors():
        jvm_trigger = driver_jvm(spark).io.github.sparkkafkashare.KafkaShareTriggers.realTime(batch_duration)
        writer._jwrite = writer._jwrite.trigger(jvm_trigger)
    return writer
