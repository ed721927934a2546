package example.sinks;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.UUID;

import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/**
 * A {@code foreach} sink that writes each row as it gets it, as a real-time query's JVM writer does:
 * a line per row, {@code <value>,<deliveryCount>,<latency ms>,<written at ms>} (the latency from the
 * record's timestamp to the write), flushed before {@link #process} returns, to a file of its own per task attempt in
 * {@code directory}. The rows need columns {@code value} (string), {@code deliveryCount} and
 * {@code timestamp}.
 *
 * <p>{@code fault} strikes once in the whole application, after the writer has written
 * {@code afterRows} rows, the file {@code <directory>/<fault>-injected} recording it: {@code fail}
 * fails the task, {@code halt} ends the executor's JVM at once (as a lost executor), {@code none}
 * never strikes.
 */
public final class RowFileWriter extends ForeachWriter<Row> {
  private final String directory;
  private final String fault;
  private final long afterRows;
  private transient BufferedWriter out;
  private transient long written;

  public RowFileWriter(String directory, String fault, long afterRows) {
    this.directory = directory;
    this.fault = fault;
    this.afterRows = afterRows;
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    Path file = Paths.get(directory, "part-" + partitionId + "-" + epochId + "-" + UUID.randomUUID() + ".csv");
    try {
      Files.createDirectories(file.getParent());
      out = Files.newBufferedWriter(file, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return true;
  }

  @Override
  public void process(Row row) {
    long now = System.currentTimeMillis();
    long latencyMs = now - row.getTimestamp(row.fieldIndex("timestamp")).getTime();
    try {
      out.write(row.getString(row.fieldIndex("value")) + "," + row.getInt(row.fieldIndex("deliveryCount")) + ","
          + latencyMs + "," + now);
      out.newLine();
      out.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    written++;
    if (!fault.equals("none") && written >= afterRows && firstTime()) {
      if (fault.equals("halt")) {
        Runtime.getRuntime().halt(137);
      }
      throw new IllegalStateException("injected: the sink failed after " + written + " rows");
    }
  }

  private boolean firstTime() {
    try {
      Files.createFile(Paths.get(directory, fault + "-injected"));
      return true;
    } catch (FileAlreadyExistsException e) {
      return false;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void close(Throwable errorOrNull) {
    try {
      if (out != null) {
        out.close();
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
