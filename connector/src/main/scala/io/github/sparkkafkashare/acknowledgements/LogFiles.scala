package io.github.sparkkafkashare.acknowledgements

import java.io.{File, IOException}
import java.nio.file.{FileAlreadyExistsException => LinkTargetExists, Files}
import java.util.UUID
import java.util.concurrent.atomic.AtomicBoolean

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{CommonPathCapabilities, FileAlreadyExistsException, FileSystem, LocalFileSystem, Path, RawLocalFileSystem}
import org.apache.spark.internal.Logging

/**
 * How the records log puts a file in place on its store: whole (readers see all of it or nothing),
 * and either replacing what is there or only if nothing is (the first writer wins, atomically: of
 * writers that race to create one file, exactly one does).
 *
 *  - The local file system: a temporary file, hard-linked into place. `link(2)` refuses an existing
 *    target; Hadoop's local rename replaces it, and Java's move without replacing checks first.
 *  - Stores where a file appears whole as its stream closes (S3A): written in place, with one
 *    request. Only if nothing is there by a conditional write (`If-None-Match`), where the store
 *    offers it (S3A from Hadoop 3.4.2, which Spark 4.1 ships, `fs.option.create.conditional.overwrite`).
 *    Without it (the Hadoop of Spark 3.5 and 4.0) S3A checks as the stream opens and writes as it
 *    closes, so two writers that race can both win; logged once per JVM.
 *  - Other stores (HDFS): a temporary file renamed into place, after a check that nothing is there.
 *    HDFS refuses, atomically, to rename over an existing file; elsewhere it is as atomic as the
 *    store's rename.
 */
private[acknowledgements] final class LogFiles(fs: FileSystem, root: Path) extends Logging {
  import LogFiles._

  /**
   * Whether a file only appears, whole, when its stream is closed, and can be abandoned instead (S3A
   * says so; it is what Spark's own abortable-stream checkpoint manager requires). There a file is
   * written in place with one request, where a rename would be a copy and a delete.
   */
  val appearWhole: Boolean = fs.hasPathCapability(root, CommonPathCapabilities.ABORTABLE_STREAM)
  private val conditionalWrites = appearWhole && fs.hasPathCapability(root, ConditionalOverwrite)

  /** The local file behind a path, where the store is the local file system. */
  private val localFile: Option[Path => File] = fs match {
    case raw: RawLocalFileSystem => Some(raw.pathToFile)
    case checked: LocalFileSystem => Some(checked.pathToFile)
    case _ if fs.getUri.getScheme == "file" => Some(p => new File(p.toUri.getPath))
    case _ => None
  }

  /** [[localFile]] where the store is Hadoop's own local file system (not one of a scheme of its own over it). */
  private val plainLocalFile = localFile.filter(_ => fs.getUri.getScheme == "file")

  /**
   * Creates `target` holding `content` unless a file is there; returns whether this call created it.
   * False can also mean that it did: a conditional write the client retries (its answer lost on the
   * way) is refused by its own first try. Callers take the file's content as the outcome, not this.
   *
   * @param beforeItAppears throws if the file must not appear after all: called last before it does
   */
  def createFirst(target: Path, content: Array[Byte], beforeItAppears: () => Unit): Boolean =
    if (appearWhole) {
      beforeItAppears()
      if (!conditionalWrites && notAtomicWarned.compareAndSet(false, true)) {
        logWarning(s"The records log in $root cannot tell two writers of one file apart atomically: the store " +
          s"offers no conditional writes ($ConditionalOverwrite; S3A has them from Hadoop 3.4.2). Two attempts of " +
          "one task that log their records at the same moment (a task Spark wrote off, still running beside its " +
          "retry) could both be taken as the batch's.")
      }
      try { writeInPlace(target, content, overwrite = false); true }
      catch {
        // A conditional write refused reports as the store's own error, as the stream closes.
        case _: FileAlreadyExistsException => false
        case e: IOException if conditionalWrites && fs.exists(target) =>
          logDebug(s"$target is there: ${e.getMessage}"); false
      }
    } else {
      val temporary = writeTemporary(target, content)
      try {
        beforeItAppears()
        localFile match {
          case Some(file) =>
            try { Files.createLink(file(target).toPath, file(temporary).toPath); true }
            catch {
              case _: LinkTargetExists => false
            }
          case None => !fs.exists(target) && fs.rename(temporary, target)
        }
      } finally fs.delete(temporary, false) // still there unless renamed into place
    }

  /** Puts `content` in place of `target`, whatever is there. */
  def replace(target: Path, content: Array[Byte]): Unit =
    if (appearWhole) writeInPlace(target, content, overwrite = true)
    else {
      val temporary = writeTemporary(target, content)
      if (fs.exists(target)) fs.delete(target, false)
      if (!fs.rename(temporary, target)) throw new IOException(s"could not rename $temporary to $target")
    }

  /**
   * Writes `target` in place, where files appear whole. S3A's "performance" create skips probing the
   * path for a directory (the log never makes one there), and with it the check for an existing file,
   * so it is used only to overwrite. A conditional write makes no probe either: the store checks.
   */
  private def writeInPlace(target: Path, content: Array[Byte], overwrite: Boolean): Unit = {
    val out = fs.createFile(target).overwrite(overwrite).opt("fs.s3a.create.performance", overwrite)
      .opt(ConditionalOverwrite, !overwrite && conditionalWrites).build()
    try out.write(content)
    catch { case NonFatal(e) => out.abort(); throw e }
    out.close()
  }

  /**
   * A file beside `target`, holding `content`, to be put in place whole. On the local file system
   * itself it is written through java.nio: Hadoop's local file system sets each new file's
   * permissions by starting a `chmod` process where it has no native library, and writes a checksum
   * file beside it, which took most of a write's time (and a part of an `after-log` round is one write).
   */
  private def writeTemporary(target: Path, content: Array[Byte]): Path = {
    val temporary = new Path(target.getParent, s".${target.getName}.${UUID.randomUUID()}.tmp")
    plainLocalFile match {
      case Some(file) =>
        Files.createDirectories(file(target.getParent).toPath)
        Files.write(file(temporary).toPath, content)
      case None =>
        val out = fs.create(temporary, true)
        try out.write(content)
        finally out.close()
    }
    temporary
  }
}

private[acknowledgements] object LogFiles {

  /** Hadoop's option for a create that fails if the file exists, checked by the store (S3A: If-None-Match). */
  val ConditionalOverwrite = "fs.option.create.conditional.overwrite"
  private val notAtomicWarned = new AtomicBoolean()
}
