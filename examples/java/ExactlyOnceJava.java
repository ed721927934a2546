// Exactly once into a file sink: two-phase-commit logs each batch's records in the checkpoint.
//
//   spark-submit --jars spark-kafka-share-assembly.jar --class ExactlyOnceJava examples.jar \
//     localhost:9092 orders orders-workers /tmp/out

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

public final class ExactlyOnceJava {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], topic = args[1], group = args[2], out = args[3];
    SparkSession spark = SparkSession.builder().appName("kafka-share-exactly-once-java").getOrCreate();

    // example: exactly-once
    Dataset<Row> df = spark.readStream()
        .format("kafka-share")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.share.group.id", group)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.share.exactly.once.strategy", "two-phase-commit")
        .load();

    // A sink idempotent per batch id: the file sink writes a re-run batch's files once.
    StreamingQuery query = df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream()
        .format("parquet")
        .option("checkpointLocation", out + "/checkpoint") // holds the records log too
        .trigger(Trigger.AvailableNow())
        .start(out + "/table");
    query.awaitTermination();
    // end example

    Dataset<Row> table = spark.read().parquet(out + "/table");
    System.out.println("records read: " + table.count());
    System.out.println("distinct records: " + table.select("topic", "partition", "offset").distinct().count());
    spark.stop();
  }
}
