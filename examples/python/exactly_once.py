"""Exactly once into a file sink: two-phase-commit logs each batch's records in the checkpoint.

spark-submit --jars spark-kafka-share-assembly.jar exactly_once.py localhost:9092 orders orders-workers /tmp/out
"""

import sys

from pyspark.sql import SparkSession
from spark_kafka_share import ExactlyOnceStrategy, KafkaShareOptions, read_share_stream

bootstrap, topic, group, out = sys.argv[1:5]
spark = SparkSession.builder.appName("kafka-share-exactly-once").getOrCreate()

# example: exactly-once
df = read_share_stream(
    spark,
    KafkaShareOptions(
        bootstrap_servers=bootstrap,
        group_id=group,
        subscribe=[topic],
        starting_offsets="earliest",
        exactly_once_strategy=ExactlyOnceStrategy.TWO_PHASE_COMMIT,
    ),
)

# A sink idempotent per batch id: the file sink writes a re-run batch's files once.
query = (
    df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
    .writeStream.format("parquet")
    .option("checkpointLocation", f"{out}/checkpoint")  # holds the records log too
    .trigger(availableNow=True)
    .start(f"{out}/table")
)
query.awaitTermination()
# end example

table = spark.read.parquet(f"{out}/table")
print(f"records read: {table.count()}")
print(
    f"distinct records: {table.select('topic', 'partition', 'offset').distinct().count()}"
)
spark.stop()
