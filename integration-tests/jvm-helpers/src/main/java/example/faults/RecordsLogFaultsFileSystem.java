package example.faults;

import java.io.IOException;
import java.net.URI;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.regex.Pattern;

import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.util.Progressable;

/**
 * The local file system under the scheme {@code faulty}, as a checkpoint's store that misbehaves once
 * at an after-log part past a round's first ({@code kafka-share-rounds/<round>/<slot>.<part>.json},
 * part 1 or later), once in the whole application. Spark makes it from {@code spark.hadoop.fs.faulty.impl};
 * a marker file records that the fault struck, across the driver's and the executors' JVMs:
 * <ul>
 *   <li>{@code fs.faulty.fail-part-write}: the marker's path; the first write of such a part fails,
 *       so its task fails between the part's poll and its write;</li>
 *   <li>{@code fs.faulty.stall-after-part-write}: the marker's path; once the first such part is in
 *       place, its writer stalls for {@code fs.faulty.stall-ms} before it goes on to ACCEPT the part
 *       (the records log deletes its temporary file last).</li>
 * </ul>
 */
public final class RecordsLogFaultsFileSystem extends RawLocalFileSystem {

  /** The temporary file the records log writes before it links a part into place. */
  private static final Pattern LATER_PART_TEMPORARY = Pattern.compile("\\.\\d+\\.[1-9]\\d*\\.json\\..+\\.tmp");

  @Override
  public URI getUri() {
    return URI.create("faulty:///");
  }

  @Override
  public FSDataOutputStream create(
      Path f, boolean overwrite, int bufferSize, short replication, long blockSize, Progressable progress)
      throws IOException {
    if (isLaterPart(f) && firstTime("fs.faulty.fail-part-write")) {
      throw new IOException("injected: the store failed to write " + f);
    }
    return super.create(f, overwrite, bufferSize, replication, blockSize, progress);
  }

  @Override
  public boolean delete(Path f, boolean recursive) throws IOException {
    if (isLaterPart(f) && firstTime("fs.faulty.stall-after-part-write")) {
      try {
        Thread.sleep(getConf().getLong("fs.faulty.stall-ms", 60_000L));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted while stalled", e);
      }
    }
    return super.delete(f, recursive);
  }

  private static boolean isLaterPart(Path f) {
    return LATER_PART_TEMPORARY.matcher(f.getName()).matches();
  }

  /** True for the first call across the application where `markerSetting` names a marker file. */
  private boolean firstTime(String markerSetting) throws IOException {
    String marker = getConf().get(markerSetting);
    if (marker == null) {
      return false;
    }
    try {
      Files.createFile(Paths.get(marker));
      return true;
    } catch (FileAlreadyExistsException e) {
      return false;
    }
  }
}
