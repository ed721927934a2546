"""Reads a topic through a Kafka share group with the kafka-share source, prints what it read and the
group's state afterwards. Run by `make demo` against the local broker; see dev/demo."""

from __future__ import annotations

import argparse
import tempfile

from pyspark.sql import SparkSession

from spark_kafka_share import (
    KafkaShareOptions,
    configure_spark_with_kafka_share,
    read_share_stream,
    share_group_state,
)

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--bootstrap-servers", default="localhost:9092")
parser.add_argument("--topic", required=True)
parser.add_argument("--group", required=True)
args = parser.parse_args()

builder = (
    SparkSession.builder.master("local[2]").appName("kafka-share-demo").config("spark.ui.enabled", "false")
)
spark = configure_spark_with_kafka_share(builder).getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

options = KafkaShareOptions(
    bootstrap_servers=args.bootstrap_servers,
    group_id=args.group,
    subscribe=[args.topic],
    parallelism=2,  # two share consumers, whatever the number of partitions
    starting_offsets="earliest",  # a new group would otherwise start at the end of the topic
)
orders = read_share_stream(spark, options).selectExpr(
    "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset", "deliveryCount"
)

with tempfile.TemporaryDirectory() as checkpoint:
    query = (
        orders.writeStream.format("console")
        .option("truncate", "false")
        .option("numRows", "100")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)  # drain what is there, then stop
        .start()
    )
    query.awaitTermination()

metrics = query.lastProgress["sources"][0]["metrics"] if query.lastProgress else {}
acquired, accepted = metrics.get("recordsAcquired"), metrics.get("recordsAccepted")
print(f"kafka-share read {acquired} records and accepted {accepted}.")

state = share_group_state(spark, args.bootstrap_servers, args.group)
members = len(state.members)
print(f"Share group '{state.group_id}': state {state.state}, {members} members, total lag {state.total_lag}")
for p in state.partitions:
    print(f"  {p.topic}-{p.partition}: start offset {p.start_offset}, lag {p.lag}")
spark.stop()
