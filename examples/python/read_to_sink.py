"""Read a topic through a share group into a Parquet table, then stop: kafka-share's plain read.

spark-submit --jars spark-kafka-share-assembly.jar read_to_sink.py localhost:9092 orders orders-workers /tmp/out
"""

import sys

from pyspark.sql import SparkSession
from spark_kafka_share import KafkaShareOptions, read_share_stream

bootstrap, topic, group, out = sys.argv[1:5]
spark = SparkSession.builder.appName("kafka-share-read").getOrCreate()

# example: read
options = KafkaShareOptions(
    bootstrap_servers=bootstrap,
    group_id=group,
    subscribe=[topic],
    starting_offsets="earliest",  # only matters for a new group
)
df = read_share_stream(spark, options)

query = (
    df.selectExpr("CAST(value AS STRING) AS value", "deliveryCount")
    .writeStream.format("parquet")
    .option("checkpointLocation", f"{out}/checkpoint")
    .trigger(availableNow=True)  # read what the group has, then stop
    .start(f"{out}/table")
)
query.awaitTermination()
# end example

print(f"records read: {spark.read.parquet(f'{out}/table').count()}")
spark.stop()
