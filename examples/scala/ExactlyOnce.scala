// Exactly once into a file sink: two-phase-commit logs each batch's records in the checkpoint.
//
//   spark-submit --jars spark-kafka-share-assembly.jar --class ExactlyOnce examples.jar \
//     localhost:9092 orders orders-workers /tmp/out

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.Trigger

object ExactlyOnce {
  def main(args: Array[String]): Unit = {
    val Array(bootstrap, topic, group, out) = args.take(4)
    val spark = SparkSession.builder().appName("kafka-share-exactly-once").getOrCreate()

    // example: exactly-once
    val df = spark.readStream
      .format("kafka-share")
      .option("kafka.bootstrap.servers", bootstrap)
      .option("kafka.share.group.id", group)
      .option("subscribe", topic)
      .option("startingOffsets", "earliest")
      .option("kafka.share.exactly.once.strategy", "two-phase-commit")
      .load()

    // A sink idempotent per batch id: the file sink writes a re-run batch's files once.
    val query = df
      .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
      .writeStream
      .format("parquet")
      .option("checkpointLocation", s"$out/checkpoint") // holds the records log too
      .trigger(Trigger.AvailableNow())
      .start(s"$out/table")
    query.awaitTermination()
    // end example

    val table = spark.read.parquet(s"$out/table")
    println(s"records read: ${table.count()}")
    println(s"distinct records: ${table.select("topic", "partition", "offset").distinct().count()}")
    spark.stop()
  }
}
