"""Reading a Kafka share group as a streaming DataFrame."""

from __future__ import annotations

import dataclasses
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ._jvm import is_connect_session, raising_kafka_share_errors, require_connector
from .options import KafkaShareOptions


def read_share_stream(
    spark: SparkSession, options: KafkaShareOptions | None = None, **fields: Any
) -> DataFrame:
    """``spark.readStream.format("kafka-share")`` with typed options, its errors raised as this package's.

    Give the options as a :class:`KafkaShareOptions`, as its fields by keyword, or both (the
    keywords then replace fields of ``options``)::

        df = read_share_stream(spark, bootstrap_servers="localhost:9092", group_id="orders-processor",
                               subscribe=["orders"])
        query = (df.selectExpr("CAST(value AS STRING) AS order")
                   .writeStream.format("console")
                   .option("checkpointLocation", "/tmp/orders-checkpoint")
                   .start())

    The DataFrame has the columns ``key`` and ``value`` (binary), ``topic``, ``partition``, ``offset``,
    ``timestamp``, ``timestampType``, ``headers`` (only with ``include_headers=True``) and
    ``deliveryCount`` (1 on a record's first delivery).

    Works with Spark Connect too, where the connector jar must be on the Connect server. The connector
    checks the options: in a classic session at ``load()``, on Spark Connect when the server analyses
    the DataFrame, which this function asks for.

    Raises:
        KafkaShareConfigurationError: an option is missing, invalid or not supported.
        KafkaShareConnectorNotFoundError: the classic session's JVM does not have the connector.
    """
    resolved = KafkaShareOptions(**fields) if options is None else dataclasses.replace(options, **fields)
    options_map = resolved.to_options()
    if not is_connect_session(spark):
        require_connector(spark)
    with raising_kafka_share_errors():
        df = spark.readStream.format("kafka-share").options(**options_map).load()
        if is_connect_session(spark):
            # Spark Connect is lazy: have the server check the options now, as load() does in classic.
            _ = df.schema
        return df
