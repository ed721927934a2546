"""Explicit acknowledgement from ``foreachBatch``: choose, per record, what the share group does with it.

With ``acknowledgment_mode=AcknowledgmentMode.EXPLICIT`` on the source, a ``foreachBatch`` function
marks records of its batch::

    from pyspark.sql import functions as F
    from spark_kafka_share import AcknowledgeType, acknowledge, marks

    def process(batch_df, batch_id):
        parsed = batch_df.withColumn("order", F.from_json(F.col("value").cast("string"), schema))
        parsed.filter("order IS NOT NULL").write.mode("append").saveAsTable("orders")
        # Unparseable records are never delivered again; everything else is accepted.
        acknowledge(batch_df, marks(parsed.filter("order IS NULL"), AcknowledgeType.REJECT))

The marks take effect when Spark commits the batch, at the consumer that holds the records. If the
batch fails instead, all of its records are released and delivered again.

Poison records (ones that fail every time) are retried a bounded number of times and then parked::

    failed = ...  # the rows of batch_df whose processing failed
    release_or_dead_letter(batch_df, failed, max_deliveries=5, dead_letter_topic="orders-dlq")

With the source option ``dead_letter_topic`` (Kafka 4.4), the broker writes the rejected records to
the group's dead-letter topic instead: call ``release_or_dead_letter`` without a topic.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ._jvm import driver_jvm, raising_kafka_share_errors, require_classic_session, require_connector


class AcknowledgeType(str, Enum):
    """What the share group does with a marked record once its batch commits."""

    ACCEPT = "accept"
    """Done: never delivered again (the default for records left unmarked)."""
    RELEASE = "release"
    """Delivered again, with ``deliveryCount`` one higher."""
    REJECT = "reject"
    """Never delivered again, and not counted as processed (for records that cannot be processed)."""


def marks(records: DataFrame, acknowledgement: AcknowledgeType) -> DataFrame:
    """The marks DataFrame that gives every record of ``records`` the same ``acknowledgement``.

    ``records`` needs the source's ``topic``, ``partition`` and ``offset`` columns::

        marks(batch_df.filter("deliveryCount > 3"), AcknowledgeType.REJECT)
    """
    return records.select(
        "topic", "partition", "offset", F.lit(AcknowledgeType(acknowledgement).value).alias("acknowledgement")
    )


def acknowledge(batch_df: DataFrame, marks_df: DataFrame) -> None:
    """Mark records of a ``foreachBatch`` batch ACCEPT, RELEASE or REJECT.

    ``batch_df`` is the DataFrame ``foreachBatch`` received; ``marks_df`` has the columns ``topic``,
    ``partition``, ``offset`` and ``acknowledgement`` (``"accept"``, ``"release"`` or ``"reject"``),
    for example from :func:`marks`. Records left unmarked are accepted. Only the marks are collected
    to the driver, so mark the exceptions. Marking a record twice keeps the later mark.

    Raises ``KafkaShareAcknowledgementError`` if the source is not in explicit mode, the marks are
    malformed, or a marked record is not in this batch. Needs a classic session (not Spark Connect).
    """
    with raising_kafka_share_errors():
        _jvm_acknowledgements(batch_df, "acknowledge()").acknowledge(batch_df._jdf, marks_df._jdf)


def release_or_dead_letter(
    batch_df: DataFrame, failed_df: DataFrame, max_deliveries: int, dead_letter_topic: str | None = None
) -> int:
    """Retry the records of ``failed_df`` a bounded number of times, then park them.

    ``failed_df`` holds rows of ``batch_df`` (with the source's columns) whose processing failed.
    Records delivered fewer than ``max_deliveries`` times are released (delivered again with
    ``deliveryCount`` one higher); the others are copied to ``dead_letter_topic``, if given, and
    rejected. Copies keep key, value and headers and add the headers ``kafka-share.origin``
    (``topic-partition@offset``) and ``kafka-share.delivery-count``. Returns how many records were
    parked. Needs ``acknowledgment_mode=AcknowledgmentMode.EXPLICIT`` and a classic session.

    With the source option ``dead_letter_topic`` the broker writes the rejected records to the
    group's dead-letter topic, with Kafka's ``__dlq.errors.*`` headers; ``dead_letter_topic`` here
    must then be None (``KAFKA_SHARE_DEAD_LETTER_TOPIC_TWICE`` otherwise).
    """
    acknowledgements = _jvm_acknowledgements(batch_df, "release_or_dead_letter()")
    with raising_kafka_share_errors():
        parked = acknowledgements.releaseOrDeadLetter(
            batch_df._jdf, failed_df._jdf, max_deliveries, dead_letter_topic
        )
    return int(parked)


def _jvm_acknowledgements(batch_df: DataFrame, what: str) -> Any:
    """The JVM's KafkaShareAcknowledgements, for a batch of a classic session that has the connector."""
    spark = batch_df.sparkSession
    require_classic_session(
        spark,
        what,
        "the marks go to the kafka-share source inside the driver JVM",
        "Run the query from a classic session, or use acknowledgment_mode=implicit.",
    )
    require_connector(spark)
    return driver_jvm(spark).io.github.sparkkafkashare.KafkaShareAcknowledgements
