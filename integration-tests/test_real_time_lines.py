"""Real-time mode on every Spark line (`make test-compat`): a query runs on Spark 4.1 and later, set up
with spark_kafka_share.real_time_trigger (PySpark 4.1 has no realTime argument), and Spark 3.5 and
4.0 get the error that names the Spark it needs. test_real_time.py holds the faults, on PySpark 4.2+."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import Row, SparkSession
from spark_kafka_share import KafkaShareError, real_time_trigger

from conftest import KafkaCluster, share_stream, values
from expectations import assert_every_record_once

SPARK_LINE = tuple(int(n) for n in pyspark.__version__.split(".")[:2])


@pytest.mark.compat
@pytest.mark.skipif(SPARK_LINE < (4, 1), reason="real-time mode from Spark 4.1")
def test_a_real_time_query_reads_every_record_once_into_a_python_foreach_writer(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected = values(500)
    topic = kafka.topic_with(expected, partitions=2, key=str)
    rows = tmp_path / "rows"
    rows.mkdir()

    def write(row: Row) -> None:  # one file a Python worker, a line a row
        with open(rows / f"{os.getpid()}.txt", "a") as f:
            f.write(row.value + "\n")

    writer = (
        share_stream(spark, topic, group, startingOffsets="earliest")
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.foreach(write)
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    query = real_time_trigger(writer, "5 seconds").start()
    try:
        deadline = time.monotonic() + 90
        while len(written(rows)) < len(expected) and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(1)
        time.sleep(6)  # a batch turnover: every task has ACCEPTed what it wrote
    finally:
        query.stop()
    assert_every_record_once(expected, written(rows), kafka=kafka, group=group, topic=topic)


def written(rows: Path) -> list[str]:
    return [line for f in rows.glob("*.txt") for line in f.read_text().splitlines()]


@pytest.mark.compat
@pytest.mark.skipif(SPARK_LINE >= (4, 1), reason="Spark 4.1 and later have real-time mode")
def test_spark_before_41_is_told_real_time_mode_needs_41(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    writer = share_stream(spark, kafka.topic_with(values(1)), group).writeStream.format("console")
    with pytest.raises(KafkaShareError, match=r"KAFKA_SHARE_REAL_TIME_NEEDS_SPARK.*Spark 4\.1 or later"):
        real_time_trigger(writer, "5 seconds")
