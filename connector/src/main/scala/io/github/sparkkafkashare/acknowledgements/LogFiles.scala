package io.github.sparkkafkashare.acknowledgements

import java.io.{File, IOException}
import java.nio.file.{FileAlreadyExistsException => LinkTargetExists, Files}
import java.util.UUID

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{CommonPathCapabilities, FileAlreadyExistsException, FileSystem, LocalFileSystem, Path, RawLocalFileSystem}
import org.apache.spark.internal.Logging

/**
 * How the records log puts a file in place on its store: whole (readers see all of it or nothing),
 * and either replacing what is there or only if nothing is (the first writer wins, atomically: of
 * writers that race to create one file, exactly one does). [[nonAtomicCreate]] says where it cannot.
 *
 *  - The local file system: a temporary file, hard-linked into place. `link(2)` refuses an existing
 *    target; Hadoop's local rename replaces it, and Java's move without replacing checks first. A
 *    file system that refuses hard links (a FUSE mount of an object store) is not atomic: there,
 *    with `allowNonAtomicCreate`, the file is moved into place after that check.
 *  - Stores where a file appears whole as its stream closes (S3A): written in place, with one
 *    request. Only if nothing is there by a conditional write (`If-None-Match`), where the store
 *    offers it (S3A from Hadoop 3.4.2, which Spark 4.1 ships, `fs.option.create.conditional.overwrite`).
 *    Without it (the Hadoop of Spark 3.5 and 4.0) S3A checks as the stream opens and writes as it
 *    closes, so two writers that race can both win.
 *  - Other stores: a temporary file renamed into place, after a check that nothing is there. HDFS
 *    refuses, atomically, to rename over an existing file; other stores are taken as not atomic.
 *
 * @param allowNonAtomicCreate the query accepts a store where two writers could both win
 *                             (`kafka.share.checkpoint.allow.non.atomic.create`)
 */
private[acknowledgements] final class LogFiles(fs: FileSystem, root: Path, allowNonAtomicCreate: Boolean = false)
  extends Logging {
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
   * Why two writers that race to create one file could both win on this store, if they could. The
   * local file system is asked by linking a file in `root`: only a try tells whether it refuses links.
   */
  lazy val nonAtomicCreate: Option[String] =
    if (appearWhole) {
      if (conditionalWrites) None
      else Some(s"the store offers no conditional writes ($ConditionalOverwrite; S3A has them from Hadoop 3.4.2)")
    } else localFile match {
      case Some(file) => refusedLink(file)
      case None if fs.getUri.getScheme == "hdfs" => None
      case None =>
        Some(s"its file system (${fs.getClass.getName}) is not known to refuse atomically to rename over a file")
    }

  /** Why the local file system under `root` refuses a hard link, if it does. */
  private def refusedLink(file: Path => File): Option[String] = {
    val target = new Path(root, s".link-probe-${UUID.randomUUID()}")
    val temporary = writeTemporary(target, Array.emptyByteArray)
    try { Files.createLink(file(target).toPath, file(temporary).toPath); None }
    catch {
      case e: IOException =>
        Some(s"its local file system refuses hard links (${e.getClass.getSimpleName}: ${e.getMessage})")
    } finally {
      fs.delete(target, false)
      fs.delete(temporary, false)
    }
  }

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
              case _: IOException if allowNonAtomicCreate => // no hard links here: a check, then a move
                try { Files.move(file(temporary).toPath, file(target).toPath); true }
                catch { case _: LinkTargetExists => false }
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
}
