// Read a topic through a share group into a Parquet table, then stop: kafka-share's plain read.
//
//   spark-submit --packages io.github.sparkkafkashare:spark-kafka-share:VERSION \
//     --class ReadToSinkJava examples.jar localhost:9092 orders orders-workers /tmp/out

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

public final class ReadToSinkJava {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], topic = args[1], group = args[2], out = args[3];
    SparkSession spark = SparkSession.builder().appName("kafka-share-read-java").getOrCreate();

    // example: read
    Dataset<Row> df = spark.readStream()
        .format("kafka-share")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.share.group.id", group)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest") // only matters for a new group
        .load();

    StreamingQuery query = df.selectExpr("CAST(value AS STRING) AS value", "deliveryCount")
        .writeStream()
        .format("parquet")
        .option("checkpointLocation", out + "/checkpoint")
        .trigger(Trigger.AvailableNow()) // read what the group has, then stop
        .start(out + "/table");
    query.awaitTermination();
    // end example

    System.out.println("records read: " + spark.read().parquet(out + "/table").count());
    spark.stop();
  }
}
