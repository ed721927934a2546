// Read a topic through a share group into a Parquet table, then stop: kafka-share's plain read.
//
//   spark-submit --jars spark-kafka-share-assembly.jar --class ReadToSink examples.jar \
//     localhost:9092 orders orders-workers /tmp/out

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.Trigger

object ReadToSink {
  def main(args: Array[String]): Unit = {
    val Array(bootstrap, topic, group, out) = args.take(4)
    val spark = SparkSession.builder().appName("kafka-share-read").getOrCreate()

    // example: read
    val df = spark.readStream
      .format("kafka-share")
      .option("kafka.bootstrap.servers", bootstrap)
      .option("kafka.share.group.id", group)
      .option("subscribe", topic)
      .option("startingOffsets", "earliest") // only matters for a new group
      .load()

    val query = df
      .selectExpr("CAST(value AS STRING) AS value", "deliveryCount")
      .writeStream
      .format("parquet")
      .option("checkpointLocation", s"$out/checkpoint")
      .trigger(Trigger.AvailableNow()) // read what the group has, then stop
      .start(s"$out/table")
    query.awaitTermination()
    // end example

    println(s"records read: ${spark.read.parquet(s"$out/table").count()}")
    spark.stop()
  }
}
