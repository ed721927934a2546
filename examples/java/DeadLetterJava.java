// Explicit acknowledgement: records that fail go to a dead-letter topic, the rest are accepted.
//
//   spark-submit --jars spark-kafka-share-assembly.jar --class DeadLetterJava examples.jar \
//     localhost:9092 orders orders-workers orders-dlq /tmp/out

import io.github.sparkkafkashare.KafkaShareAcknowledgements;
import org.apache.spark.api.java.function.VoidFunction2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

public final class DeadLetterJava {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], topic = args[1], group = args[2], dlq = args[3], out = args[4];
    SparkSession spark = SparkSession.builder().appName("kafka-share-dead-letter-java").getOrCreate();

    // example: dead-letter
    Dataset<Row> df = spark.readStream()
        .format("kafka-share")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.share.group.id", group)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.share.acknowledgment.mode", "explicit")
        .load();

    VoidFunction2<Dataset<Row>, Long> processBatch = (batch, batchId) -> {
      batch.persist(); // the actions below see the same records
      Dataset<Row> rows = batch.selectExpr("CAST(value AS STRING) AS value", "topic", "partition", "offset");
      rows.filter("value NOT LIKE 'bad%'").write().mode("append").parquet(out + "/table");
      Dataset<Row> failed = batch.filter("CAST(value AS STRING) LIKE 'bad%'"); // what could not be processed
      // Released until delivered 2 times, then copied to the dead-letter topic and rejected.
      long parked = KafkaShareAcknowledgements.releaseOrDeadLetter(batch, failed, 2, dlq);
      System.out.println("batch " + batchId + ": dead-lettered " + parked);
      batch.unpersist();
    };

    StreamingQuery query = df.writeStream()
        .foreachBatch(processBatch)
        .option("checkpointLocation", out + "/checkpoint")
        .trigger(Trigger.AvailableNow())
        .start();
    query.awaitTermination();
    // end example

    System.out.println("records read: " + spark.read().parquet(out + "/table").count());
    spark.stop();
  }
}
