package io.github.sparkkafkashare.acknowledgements

import java.io.{FileNotFoundException, IOException}
import java.nio.charset.StandardCharsets.UTF_8
import java.util.UUID

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.ObjectMapper
import io.github.sparkkafkashare.options.Parsing
import org.apache.hadoop.fs.{CommonPathCapabilities, FSDataInputStream, FileAlreadyExistsException, FileStatus, FileSystem, Path}
import org.apache.hadoop.util.functional.{FutureIO, RemoteIterators}
import org.apache.kafka.common.TopicPartition
import org.apache.spark.util.SerializableConfiguration

/** A round's files in the log: each slot's, and the one of records user code RELEASEd, if any. */
private[sparkkafkashare] final case class RoundFiles(slots: Map[Int, FileStatus], released: Option[FileStatus])
/**
 * The coordinates of the records each round handed to Spark, one file per slot under
 * `<checkpoint>/sources/<n>/kafka-share-rounds/<round>/<slot>.json`, for the `checkpoint-dedup` and
 * `two-phase-commit` strategies.
 *
 * The task writes its file after polling and before any row reaches the sink, so the file is
 * durable before the batch can commit: a later run can tell which records a committed (or
 * replayed) batch held, drop their redeliveries, and, for `two-phase-commit`, read a replayed
 * batch's records back by their coordinates. A failed attempt keeps its records (the consumer holds
 * them), and a retry either finds its file or writes the same records; a retry on another executor
 * reads the file back.
 *
 * In explicit mode the driver also writes `<round>/released.json`, the records user code RELEASEd
 * from the round's batch, before the batch can commit: they were handed to Spark, but the user asked
 * for them again, so their redelivery is not a duplicate.
 *
 * Files are small: a round holds at most what the consumers acquired in it, and the driver deletes
 * files whose records all lie below their share-partition start offset (never delivered again).
 *
 * Each task writes one file and lists the log once, so on an object store a round costs each task a
 * few requests (docs/benchmarks.md, "With the checkpoint on S3 (f)", gives the counts).
 */
private[sparkkafkashare] final class RoundRecordsLog(val dir: String, hadoopConf: SerializableConfiguration)
  extends Serializable {
  import RoundRecordsLog.{ReleasedFileName, ReleasedMark}

  @transient private lazy val root = new Path(dir)
  @transient private lazy val fs: FileSystem = root.getFileSystem(hadoopConf.value)
  /**
   * Whether a file only appears, whole, when its stream is closed, and can be abandoned instead (S3A
   * says so; it is what Spark's own abortable-stream checkpoint manager requires). There a file is
   * written in place with one request, where a rename would be a copy and a delete.
   */
  @transient private lazy val filesAppearWhole = fs.hasPathCapability(root, CommonPathCapabilities.ABORTABLE_STREAM)

  /**
   * Logs `records` as what the slot's `round` handed to Spark, unless a file for it is there already:
   * the first writer wins, so every evaluation of a batch agrees on its records. Returns None when
   * this call wrote the file, or the records of the file that was there. Readers never see part of a
   * file. Two writers that start together are told apart as Spark's own offset log tells its writers
   * apart on the same file system: atomically on HDFS and where files appear whole (S3A), and on a
   * local file system by a check just before the rename.
   *
   * @param fence throws if the writer may no longer log (its query run stopped): called just before
   *              the file appears, so that a task that outlived its run does not log a round that the
   *              next run replays or forgets
   */
  def writeFirst(round: Long, slot: Int, records: Seq[LoggedRecord], fence: () => Unit): Option[Seq[LoggedRecord]] = {
    val target = slotFile(round, slot)
    val json = RoundRecordsLog.toJson(records).getBytes(UTF_8)
    val written =
      if (filesAppearWhole) {
        fence()
        try { writeInPlace(target, json, overwrite = false); true } catch { case _: FileAlreadyExistsException => false }
      } else {
        val temporary = writeTemporary(target, json)
        try fence() catch { case NonFatal(e) => fs.delete(temporary, false); throw e }
        val renamed = !fs.exists(target) && fs.rename(temporary, target)
        if (!renamed) fs.delete(temporary, false)
        renamed
      }
    if (written) None else Some(read(round, slot).getOrElse(throw new IOException(s"$target vanished while it was written")))
  }

  /**
   * Replaces the records user code RELEASEd from `round`'s batch with `released` (none: removes the
   * file). Marks made again when a failed batch runs again replace the first run's.
   */
  def writeReleased(round: Long, released: Seq[RecordCoordinates]): Unit =
    if (released.isEmpty) fs.delete(releasedFile(round), false)
    else replace(releasedFile(round), RoundRecordsLog.toJson(released.map(LoggedRecord(_, ReleasedMark))))

  private def replace(target: Path, content: String): Unit = {
    val json = content.getBytes(UTF_8)
    if (filesAppearWhole) writeInPlace(target, json, overwrite = true)
    else {
      val temporary = writeTemporary(target, json)
      if (fs.exists(target)) fs.delete(target, false)
      if (!fs.rename(temporary, target)) throw new IOException(s"could not rename $temporary to $target")
    }
  }

  /**
   * Writes `target` in place, where files appear whole. S3A's "performance" create skips probing the
   * path for a directory (the log never makes one there), and with it the check for an existing file,
   * so it is used only to overwrite.
   */
  private def writeInPlace(target: Path, json: Array[Byte], overwrite: Boolean): Unit = {
    val out = fs.createFile(target).overwrite(overwrite).opt("fs.s3a.create.performance", overwrite).build()
    try out.write(json) catch { case NonFatal(e) => out.abort(); throw e }
    out.close()
  }

  /** A file beside `target`, holding `json`, for a rename to put in place whole. */
  private def writeTemporary(target: Path, json: Array[Byte]): Path = {
    val temporary = new Path(target.getParent, s".${target.getName}.${UUID.randomUUID()}.tmp")
    val out = fs.create(temporary, true)
    try out.write(json) finally out.close()
    temporary
  }

  /**
   * Every round's files in the log. Where files appear whole, one recursive listing
   * (on an object store, one request while the log is small). Elsewhere files are renamed into
   * place (a temporary file renamed over the slot's file), so a file can vanish while it is listed:
   * there the log is listed round by round, which skips such files (a recursive listing of the local
   * file system fails on them).
   */
  def rounds(): Map[Long, RoundFiles] =
    try {
      val files =
        if (filesAppearWhole) RemoteIterators.toList(fs.listFiles(root, true)).asScala.toSeq
        else fs.listStatus(root).toSeq.filter(_.isDirectory).flatMap(round => fs.listStatus(round.getPath))
      files.flatMap(f => Parsing.long(f.getPath.getParent.getName).map(_ -> f)).groupBy(_._1).map { case (round, listed) =>
        val named = listed.map { case (_, f) => f.getPath.getName -> f }.toMap
        val slots = named.flatMap { case (name, f) =>
          Some(name).filter(_.endsWith(".json")).flatMap(name => Parsing.int(name.stripSuffix(".json"))).map(_ -> f)
        }
        round -> RoundFiles(slots, named.get(ReleasedFileName))
      }
    } catch {
      // Nothing logged yet, or a round was deleted while it was being listed: then list again.
      case _: FileNotFoundException => if (fs.exists(root)) rounds() else Map.empty
    }

  /** The records of each slot that wrote a file for `round`. */
  def read(round: Long): Map[Int, Seq[LoggedRecord]] =
    rounds().get(round).fold(Map.empty[Int, Seq[LoggedRecord]])(_.slots.map { case (slot, file) => slot -> readFile(file) })

  /** The records the slot logged for `round`, if it wrote a file. */
  def read(round: Long, slot: Int): Option[Seq[LoggedRecord]] =
    try Some(parse(fs.open(slotFile(round, slot)))) catch { case _: FileNotFoundException => None }

  private def slotFile(round: Long, slot: Int) = new Path(new Path(root, round.toString), s"$slot.json")
  private def releasedFile(round: Long) = new Path(new Path(root, round.toString), ReleasedFileName)

  /** Reads a listed file (handing its status over spares an object store a request for it). */
  private[acknowledgements] def readFile(file: FileStatus): Seq[LoggedRecord] =
    parse(FutureIO.awaitFuture(fs.openFile(file.getPath).withFileStatus(file).build()))

  private def parse(in: FSDataInputStream): Seq[LoggedRecord] =
    try RoundRecordsLog.fromJson(new String(in.readAllBytes(), UTF_8)) finally in.close()

  /** Forgets a round (a replayed batch that re-reads nothing must not suppress its records' redelivery). */
  def delete(round: Long): Unit = fs.delete(new Path(root, round.toString), true)

  /**
   * Deletes the files of rounds up to `through` whose every record Kafka will never deliver again: it
   * lies below its share-partition's start offset, or its topic now has another id (deleted and made
   * again); returns how many records the log still remembers.
   */
  def prune(through: Long, startOffsets: Map[TopicPartition, Long], topicIds: Map[String, String]): Long =
    rounds().filter(_._1 <= through).map { case (round, files) =>
      val live = files.slots.values.flatMap(readFile).count { r =>
        val c = r.coordinates
        val sameTopic = r.topicId.forall(id => topicIds.get(c.topic).forall(_ == id))
        sameTopic && startOffsets.get(new TopicPartition(c.topic, c.partition)).forall(c.offset >= _)
      }
      if (live == 0) delete(round)
      live.toLong
    }.sum
}
private[sparkkafkashare] object RoundRecordsLog {
  private val mapper = new ObjectMapper()
  private val ReleasedFileName = "released.json"
  /** The delivery count written for released records: the driver's marks do not carry it. */
  private val ReleasedMark = 0

  /** `{"records": [[topic, partition, offset, deliveryCount, topicId, timestamp], ...]}`, null where unknown. */
  def toJson(records: Seq[LoggedRecord]): String = mapper.writeValueAsString(Map("records" -> records.map { r =>
    Seq[Any](r.coordinates.topic, r.coordinates.partition, r.coordinates.offset, r.deliveryCount,
      r.topicId.orNull, r.timestamp.map(Long.box).orNull).asJava
  }.asJava).asJava)

  def fromJson(json: String): Seq[LoggedRecord] = try {
    mapper.readTree(json).get("records").elements().asScala.map { r =>
      def known(i: Int) = Option(r.get(i)).filterNot(_.isNull)
      LoggedRecord(RecordCoordinates(r.get(0).asText(), r.get(1).asInt(), r.get(2).asLong()), r.get(3).asInt(),
        known(4).map(_.asText()), known(5).map(_.asLong()))
    }.toSeq
  } catch {
    case NonFatal(e) => throw new IllegalStateException(s"Unreadable kafka-share round file: ${e.getMessage}", e)
  }
}
