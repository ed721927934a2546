// Explicit acknowledgement: records that fail go to a dead-letter topic, the rest are accepted.
//
//   spark-submit --jars spark-kafka-share-assembly.jar --class DeadLetter examples.jar \
//     localhost:9092 orders orders-workers orders-dlq /tmp/out

import io.github.sparkkafkashare.KafkaShareAcknowledgements
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.streaming.Trigger

object DeadLetter {
  def main(args: Array[String]): Unit = {
    val Array(bootstrap, topic, group, dlq, out) = args.take(5)
    val spark = SparkSession.builder().appName("kafka-share-dead-letter").getOrCreate()

    // example: dead-letter
    val df = spark.readStream
      .format("kafka-share")
      .option("kafka.bootstrap.servers", bootstrap)
      .option("kafka.share.group.id", group)
      .option("subscribe", topic)
      .option("startingOffsets", "earliest")
      .option("kafka.share.acknowledgment.mode", "explicit")
      .load()

    val processBatch: (DataFrame, Long) => Unit = { (batch, batchId) =>
      batch.persist() // the actions below see the same records
      val rows = batch.selectExpr("CAST(value AS STRING) AS value", "topic", "partition", "offset")
      rows.filter("value NOT LIKE 'bad%'").write.mode("append").parquet(s"$out/table")
      val failed = batch.filter("CAST(value AS STRING) LIKE 'bad%'") // what could not be processed
      // Released until delivered 2 times, then copied to the dead-letter topic and rejected.
      val parked = KafkaShareAcknowledgements.releaseOrDeadLetter(batch, failed, 2, dlq)
      println(s"batch $batchId: dead-lettered $parked")
      batch.unpersist()
    }

    val query = df.writeStream
      .foreachBatch(processBatch)
      .option("checkpointLocation", s"$out/checkpoint")
      .trigger(Trigger.AvailableNow())
      .start()
    query.awaitTermination()
    // end example

    println(s"records read: ${spark.read.parquet(s"$out/table").count()}")
    spark.stop()
  }
}
