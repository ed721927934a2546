package example.driver;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.api.java.function.VoidFunction2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

/**
 * An {@code availableNow} drain of a topic through the kafka-share source, as a JVM application: a
 * standalone cluster restarts only JVM drivers under {@code --deploy-mode cluster --supervise} (Python
 * applications cannot run in cluster mode there). integration-tests/test_standalone_cluster.py kills
 * its driver mid-drain and checks what the restarted one read.
 *
 * <p>Arguments, each {@code name=value}: bootstrap, topic, group, checkpoint, out, strategy,
 * lockTimeoutMs, maxRecordsPerTrigger, parallelism. Each start of the driver appends its pid to
 * {@code <out>/driver-starts.txt}. Each batch's (value, deliveryCount) pairs go to {@code
 * <out>/batch-<id>.json}, replaced when the batch runs again, as a sink idempotent per batch id; {@code
 * <out>/done} appears when the drain has ended.
 */
public final class DrainToFiles {
    private DrainToFiles() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> arg = new HashMap<>();
        for (String a : args) {
            String[] pair = a.split("=", 2);
            arg.put(pair[0], pair[1]);
        }
        Path out = Paths.get(arg.get("out"));
        Files.createDirectories(out);
        String pid = ProcessHandle.current().pid() + "\n";
        Files.write(out.resolve("driver-starts.txt"), pid.getBytes(StandardCharsets.UTF_8),
                StandardOpenOption.CREATE, StandardOpenOption.APPEND);

        SparkSession spark = SparkSession.builder().getOrCreate();
        Dataset<Row> records = spark.readStream().format("kafka-share")
                .option("kafka.bootstrap.servers", arg.get("bootstrap"))
                .option("kafka.share.group.id", arg.get("group"))
                .option("subscribe", arg.get("topic"))
                .option("startingOffsets", "earliest")
                .option("kafka.share.exactly.once.strategy", arg.get("strategy"))
                .option("kafka.share.lock.timeout.ms", arg.get("lockTimeoutMs"))
                .option("kafka.share.parallelism", arg.get("parallelism"))
                .option("maxRecordsPerTrigger", arg.get("maxRecordsPerTrigger"))
                .load();
        VoidFunction2<Dataset<Row>, Long> toFile = (batch, batchId) -> writeBatch(out, batch, batchId);
        StreamingQuery query = records.writeStream()
                .foreachBatch(toFile)
                .option("checkpointLocation", arg.get("checkpoint"))
                .trigger(Trigger.AvailableNow())
                .start();
        query.awaitTermination();
        Files.write(out.resolve("done"), new byte[0]);
        spark.stop();
    }

    private static void writeBatch(Path out, Dataset<Row> batch, long batchId) throws IOException {
        List<Object[]> rows = new ArrayList<>();
        for (Row r : batch.selectExpr("cast(value as string)", "deliveryCount").collectAsList()) {
            rows.add(new Object[] {r.getString(0), r.get(1)});
        }
        // Written aside and renamed, so that a driver killed mid-write leaves the last whole file.
        Path written = out.resolve("batch-" + batchId + ".json.tmp");
        new ObjectMapper().writeValue(written.toFile(), rows);
        Files.move(written, out.resolve("batch-" + batchId + ".json"), StandardCopyOption.REPLACE_EXISTING,
                StandardCopyOption.ATOMIC_MOVE);
    }
}
