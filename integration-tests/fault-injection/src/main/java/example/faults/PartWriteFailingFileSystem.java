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
 * The local file system under the scheme {@code faulty}, as a checkpoint's store that fails one write:
 * the first write of an after-log part past a round's first (the temporary file of
 * {@code kafka-share-rounds/<round>/<slot>.<part>.json}, part 1 or later) fails, once in the whole
 * application. The file named by {@code fs.faulty.failed-marker} records that it did, across the
 * driver's and the executors' JVMs. Spark makes it from {@code spark.hadoop.fs.faulty.impl}.
 */
public final class PartWriteFailingFileSystem extends RawLocalFileSystem {

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
    if (LATER_PART_TEMPORARY.matcher(f.getName()).matches() && firstFailure()) {
      throw new IOException("injected: the store failed to write " + f);
    }
    return super.create(f, overwrite, bufferSize, replication, blockSize, progress);
  }

  private boolean firstFailure() throws IOException {
    String marker = getConf().get("fs.faulty.failed-marker");
    if (marker == null) {
      throw new IOException("fs.faulty.failed-marker is not set");
    }
    try {
      Files.createFile(Paths.get(marker));
      return true;
    } catch (FileAlreadyExistsException e) {
      return false;
    }
  }
}
