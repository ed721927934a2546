package io.github.sparkkafkashare.acknowledgements

import java.io.{File, IOException}
import java.net.URI
import java.nio.file.{Files, Paths}

import io.github.sparkkafkashare.errors.KafkaShareRuntimeException
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FSDataInputStream, FSDataOutputStream, FileStatus, FileSystem, Path, RawLocalFileSystem}
import org.apache.hadoop.fs.permission.FsPermission
import org.apache.hadoop.util.Progressable
import org.apache.spark.util.SerializableConfiguration
import org.scalatest.funsuite.AnyFunSuite

/**
 * Which checkpoint stores let only the first of two writers create a records-log file, and what the
 * strategies that log records do on the others: refuse them, unless the query accepts the risk (no
 * broker; the S3 cases are in LogFilesObjectStoreSuite).
 */
class LogFilesAtomicitySuite extends AnyFunSuite {
  import LogFilesAtomicitySuite._

  private def localDir() = Files.createTempDirectory("rounds").toString

  private def log(dir: String, allow: Boolean = false) =
    new RoundRecordsLog(dir, new SerializableConfiguration(conf), allow)

  private val conf = {
    val c = new Configuration()
    c.set("fs.crossdevice.impl", classOf[TemporariesElsewhereFileSystem].getName)
    c.set("fs.renaming.impl", classOf[RenamingStore].getName)
    c
  }

  private def record(offset: Long) = LoggedRecord(RecordCoordinates("t", 0, offset), 1)

  private def refusal(log: RoundRecordsLog) = intercept[KafkaShareRuntimeException](log.refuseNonAtomicCreate("x"))

  test("the local disk links each file into place: the first writer wins atomically, nothing to refuse") {
    val l = log(localDir())
    l.refuseNonAtomicCreate("two-phase-commit")
    assert(l.writeFirst(1, 0, Seq(record(1)), () => ()).isEmpty)
    assert(l.writeFirst(1, 0, Seq(record(2)), () => ()).contains(Seq(record(1))))
  }

  test("a local file system that refuses hard links (a FUSE mount of an object store) is refused, unless accepted") {
    assume(TemporariesElsewhere.onAnotherDevice, "no /dev/shm on another device than the temporary directory")
    val dir = "crossdevice://" + localDir()
    val refused = refusal(log(dir))
    assert(refused.getCondition == "KAFKA_SHARE_CHECKPOINT_NOT_ATOMIC", refused.getMessage)
    assert(refused.getMessage.contains("refuses hard links"), refused.getMessage)
    assert(refused.getMessage.contains("kafka.share.checkpoint.allow.non.atomic.create"), refused.getMessage)
    intercept[IOException](log(dir).writeFirst(1, 0, Seq(record(1)), () => ()))

    val accepted = log(dir, allow = true)
    accepted.refuseNonAtomicCreate("two-phase-commit")
    assert(accepted.writeFirst(2, 0, Seq(record(1)), () => ()).isEmpty, "moved into place instead")
    assert(accepted.writeFirst(2, 0, Seq(record(2)), () => ()).contains(Seq(record(1))), "checked first")
    assert(accepted.read(2, 0).contains(Seq(record(1))))
  }

  test("a store that renames into place, other than HDFS, is refused unless accepted") {
    val refused = refusal(log("renaming:///rounds"))
    assert(refused.getMessage.contains("is not known to refuse atomically to rename over a file"), refused.getMessage)
    log("renaming:///rounds", allow = true).refuseNonAtomicCreate("checkpoint-dedup")
  }
}

object LogFilesAtomicitySuite {

  /** Where [[TemporariesElsewhereFileSystem]] keeps temporary files: tmpfs, another device than the tests' files. */
  object TemporariesElsewhere {
    lazy val dir: File = Files.createTempDirectory(Paths.get("/dev/shm"), "temporaries").toFile

    def onAnotherDevice: Boolean = Files.isDirectory(Paths.get("/dev/shm")) &&
      Files.getFileStore(Paths.get("/dev/shm")) != Files.getFileStore(Files.createTempDirectory("device"))
  }

  /**
   * The local file system under the scheme `crossdevice`, whose temporary files live on another device:
   * linking one into place fails (EXDEV) as it does on a file system that refuses hard links.
   */
  class TemporariesElsewhereFileSystem extends RawLocalFileSystem {
    override def getUri: URI = URI.create("crossdevice:///")
    override def pathToFile(path: Path): File =
      if (path.getName.endsWith(".tmp")) new File(TemporariesElsewhere.dir, path.getName) else super.pathToFile(path)
  }

  /** A store that is neither local nor HDFS: the records log only asks it what it is. */
  class RenamingStore extends FileSystem {
    override def getUri: URI = URI.create("renaming:///")
    override def getWorkingDirectory: Path = new Path("/")
    private def unused = throw new UnsupportedOperationException("the records log only asks what this store is")
    override def open(f: Path, bufferSize: Int): FSDataInputStream = unused
    override def create(
        f: Path,
        permission: FsPermission,
        overwrite: Boolean,
        bufferSize: Int,
        replication: Short,
        blockSize: Long,
        progress: Progressable
    ): FSDataOutputStream = unused
    override def append(f: Path, bufferSize: Int, progress: Progressable): FSDataOutputStream = unused
    override def rename(src: Path, dst: Path): Boolean = unused
    override def delete(f: Path, recursive: Boolean): Boolean = unused
    override def listStatus(f: Path): Array[FileStatus] = unused
    override def setWorkingDirectory(dir: Path): Unit = unused
    override def mkdirs(f: Path, permission: FsPermission): Boolean = unused
    override def getFileStatus(f: Path): FileStatus = unused
  }

}
