"""Explicit acknowledgement: records that fail go to a dead-letter topic, the rest are accepted.

spark-submit --jars spark-kafka-share-assembly.jar dead_letter.py localhost:9092 orders orders-workers orders-dlq /tmp/out
"""

import sys

from pyspark.sql import DataFrame, SparkSession
from spark_kafka_share import (
    AcknowledgmentMode,
    KafkaShareOptions,
    read_share_stream,
    release_or_dead_letter,
)

bootstrap, topic, group, dlq, out = sys.argv[1:6]
spark = SparkSession.builder.appName("kafka-share-dead-letter").getOrCreate()

# example: dead-letter
df = read_share_stream(
    spark,
    KafkaShareOptions(
        bootstrap_servers=bootstrap,
        group_id=group,
        subscribe=[topic],
        starting_offsets="earliest",
        acknowledgment_mode=AcknowledgmentMode.EXPLICIT,
    ),
)


def process_batch(batch_df: DataFrame, batch_id: int) -> None:
    batch_df.persist()  # the actions below see the same records
    rows = batch_df.selectExpr(
        "CAST(value AS STRING) AS value", "topic", "partition", "offset"
    )
    rows.filter("value NOT LIKE 'bad%'").write.mode("append").parquet(f"{out}/table")
    failed = batch_df.filter(
        "CAST(value AS STRING) LIKE 'bad%'"
    )  # what could not be processed
    # Released until delivered 2 times, then copied to the dead-letter topic and rejected.
    parked = release_or_dead_letter(
        batch_df, failed, max_deliveries=2, dead_letter_topic=dlq
    )
    print(f"batch {batch_id}: dead-lettered {parked}")
    batch_df.unpersist()


query = (
    df.writeStream.foreachBatch(process_batch)
    .option("checkpointLocation", f"{out}/checkpoint")
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
# end example

print(f"records read: {spark.read.parquet(f'{out}/table').count()}")
spark.stop()
