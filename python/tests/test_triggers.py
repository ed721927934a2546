"""real_time_trigger: Spark's own realTime argument where PySpark has it, the JVM's trigger elsewhere."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_kafka_share import KafkaShareConnectNotSupportedError, real_time_trigger

from .fakes import FakeConnectSession


class JvmWriter:
    """The JVM DataStreamWriter behind a Python one: keeps the trigger it is given."""

    def __init__(self) -> None:
        self.jvm_trigger: Any = None

    def trigger(self, jvm_trigger: Any) -> JvmWriter:
        self.jvm_trigger = jvm_trigger
        return self


class WriterOf41:
    """A DataStreamWriter as PySpark 4.1 has it: trigger() takes no realTime."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._jwrite = JvmWriter()

    def trigger(self, *, processingTime: str | None = None) -> WriterOf41:
        raise AssertionError("the Python trigger() of PySpark 4.1 has no real-time mode")


class WriterOf42:
    """A DataStreamWriter as PySpark 4.2 and later have it."""

    def __init__(self) -> None:
        self.real_time: str | None = None

    def trigger(self, *, processingTime: str | None = None, realTime: str | None = None) -> WriterOf42:
        self.real_time = realTime
        return self


def test_a_pyspark_whose_trigger_takes_real_time_is_given_it() -> None:
    writer = WriterOf42()
    assert real_time_trigger(writer, "10 seconds") is writer  # type: ignore[arg-type]
    assert writer.real_time == "10 seconds"


@pytest.mark.jvm
def test_pyspark_41_gets_the_real_time_trigger_from_the_jvm(spark: SparkSession) -> None:
    writer = WriterOf41(spark)
    real_time_trigger(writer, "10 seconds")  # type: ignore[arg-type]
    jvm_trigger = writer._jwrite.jvm_trigger
    assert jvm_trigger is not None, "no trigger reached the JVM writer"
    assert jvm_trigger.toString() == "RealTimeTrigger(10000)"


@pytest.mark.jvm
def test_a_batch_duration_spark_cannot_read_is_an_error_naming_it(spark: SparkSession) -> None:
    writer = WriterOf41(spark)
    with pytest.raises(Exception, match="ten seconds"):
        real_time_trigger(writer, "ten seconds")  # type: ignore[arg-type]


def test_spark_connect_before_pyspark_42_is_told_to_upgrade() -> None:
    writer = WriterOf41(FakeConnectSession())
    with pytest.raises(KafkaShareConnectNotSupportedError, match=r"PySpark 4\.2 or later"):
        real_time_trigger(writer, "10 seconds")  # type: ignore[arg-type]
