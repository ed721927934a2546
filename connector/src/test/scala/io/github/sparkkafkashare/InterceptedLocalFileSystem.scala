package io.github.sparkkafkashare

import java.net.URI

import org.apache.hadoop.fs.{FSDataOutputStream, Path, RawLocalFileSystem}
import org.apache.hadoop.util.Progressable

/**
 * The local file system under a scheme of a test's own, whose file creation the test steps into, as
 * a checkpoint's storage can stall or fail: [[creating]] runs before a file is created, [[created]]
 * may wrap its stream. Hadoop makes it from `fs.<scheme>.impl`, with no arguments.
 */
abstract class InterceptedLocalFileSystem(scheme: String) extends RawLocalFileSystem {
  override def getUri: URI = URI.create(s"$scheme:///")

  protected def creating(f: Path): Unit = ()

  protected def created(f: Path, out: FSDataOutputStream): FSDataOutputStream = out

  final override def create(
      f: Path,
      overwrite: Boolean,
      bufferSize: Int,
      replication: Short,
      blockSize: Long,
      progress: Progressable
  ): FSDataOutputStream = {
    creating(f)
    created(f, super.create(f, overwrite, bufferSize, replication, blockSize, progress))
  }
}

object InterceptedLocalFileSystem {

  /** Whether `f` is a file of a round in a records log (`kafka-share-rounds/<round>/<file>`). */
  def inRound(f: Path): Boolean =
    Option(f.getParent).flatMap(p => Option(p.getParent)).exists(_.getName == "kafka-share-rounds")
}
