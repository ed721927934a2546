package io.github.sparkkafkashare.acknowledgements

import java.io.{FileNotFoundException, IOException}
import java.nio.charset.StandardCharsets.UTF_8

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.ObjectMapper
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.{KafkaShareSourceOptions, Parsing}
import org.apache.hadoop.fs.{FSDataInputStream, FileStatus, FileSystem, Path}
import org.apache.hadoop.util.functional.{FutureIO, RemoteIterators}
import org.apache.kafka.common.TopicPartition
import org.apache.spark.internal.Logging
import org.apache.spark.util.SerializableConfiguration

/**
 * A round's files in the log: each slot's parts in order, and the one of records user code RELEASEd,
 * if any.
 */
private[sparkkafkashare] final case class RoundFiles(slots: Map[Int, Seq[FileStatus]], released: Option[FileStatus])

/**
 * The coordinates of the records each round handed to Spark, one file per slot under
 * `<checkpoint>/sources/<n>/kafka-share-rounds/<round>/<slot>.json`, for the `checkpoint-dedup` and
 * `two-phase-commit` strategies.
 *
 * With `kafka.share.acknowledge=after-log` a slot logs a round in parts, one per poll: part 0 in
 * `<slot>.json`, part k in `<slot>.<k>.json`, and an empty part ends the slot's round ([[seal]]).
 * Every part is written first-writer-wins, so attempts of one task that race agree on each part
 * and on where the round ends. Readers take a slot's records as those of all its parts.
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
 * Each task writes one file per part; an executor lists the log once a round, and the directory of
 * each round it has not read, so on an object store a round costs each task a few requests
 * (docs/benchmarks.md, "With the checkpoint on S3 (f)", gives the counts).
 *
 * @param allowNonAtomicCreate the query accepts a store where two writers of one file could both win
 *                             ([[LogFiles.nonAtomicCreate]])
 */
private[sparkkafkashare] final class RoundRecordsLog(
    val dir: String,
    hadoopConf: SerializableConfiguration,
    allowNonAtomicCreate: Boolean = false
) extends Serializable with Logging {
  import RoundRecordsLog.{ReleasedFileName, ReleasedMark}

  @transient private lazy val root = new Path(dir)
  @transient private lazy val fs: FileSystem = root.getFileSystem(hadoopConf.value)
  @transient private lazy val files = new LogFiles(fs, root, allowNonAtomicCreate)

  /**
   * Fails, for `strategy`, where two writers of one file could both win on the log's store
   * ([[LogFiles.nonAtomicCreate]]), unless the query accepts it; then warns.
   */
  def refuseNonAtomicCreate(strategy: String): Unit = files.nonAtomicCreate.foreach { why =>
    if (!allowNonAtomicCreate) throw KafkaShareErrors.checkpointNotAtomic(dir, why, strategy)
    logWarning(
      s"The records log in $dir is not atomic ($why), as option ${KafkaShareSourceOptions.AllowNonAtomicCreate} " +
        "accepts: two attempts of one task that log at once could both be taken as the batch's."
    )
  }

  /**
   * Logs `records` as what the slot's `round` handed to Spark, unless a file for it is there already:
   * the first writer wins, atomically ([[LogFiles]]), so every evaluation of a batch agrees on its
   * records. Returns None when this call wrote the file, or the records of the file that was there.
   * Readers never see part of a file.
   *
   * @param fence throws if the writer may no longer log (its query run stopped): called just before
   *              the file appears, so that a task that outlived its run does not log a round that the
   *              next run replays or forgets
   */
  def writeFirst(
      round: Long,
      slot: Int,
      records: Seq[LoggedRecord],
      fence: () => Unit,
      part: Int = 0
  ): Option[Seq[LoggedRecord]] = {
    val target = partFile(round, slot, part)
    if (files.createFirst(target, RoundRecordsLog.toJson(records).getBytes(UTF_8), fence)) None
    else Some(readPart(round, slot, part).getOrElse(throw new IOException(s"$target vanished while it was written")))
  }

  /**
   * Ends the slot's round where its parts end, unless an empty part already does, and returns its
   * parts' records, each part in order: after this no attempt adds a part (`after-log`). A reader
   * that does not poll seals before it reads, so that an attempt still polling elsewhere (Spark wrote
   * it off) cannot add records, ACCEPTed once logged, that the reader's batch would not hold.
   */
  def seal(round: Long, slot: Int, fence: () => Unit): Seq[Seq[LoggedRecord]] = {
    @scala.annotation.tailrec
    def from(part: Int, parts: Vector[Seq[LoggedRecord]]): Seq[Seq[LoggedRecord]] =
      readPart(round, slot, part).orElse(writeFirst(round, slot, Nil, fence, part)) match {
        case Some(records) if records.nonEmpty => from(part + 1, parts :+ records)
        case _ => parts // an empty part, or this call's end mark
      }
    from(0, Vector.empty)
  }

  /**
   * Replaces the records user code RELEASEd from `round`'s batch with `released` (none: removes the
   * file). Marks made again when a failed batch runs again replace the first run's.
   */
  def writeReleased(round: Long, released: Seq[RecordCoordinates]): Unit =
    if (released.isEmpty) fs.delete(releasedFile(round), false)
    else files.replace(
      releasedFile(round),
      RoundRecordsLog.toJson(released.map(LoggedRecord(_, ReleasedMark))).getBytes(UTF_8)
    )

  /**
   * Every round's files in the log. Where files appear whole, one recursive listing
   * (on an object store, one request while the log is small). Elsewhere files are put in place from
   * temporary files, which vanish once in place, maybe while they are listed: there the log is listed
   * round by round, which skips such files (a recursive listing of the local file system fails on them).
   */
  def rounds(): Map[Long, RoundFiles] =
    try {
      val listed =
        if (files.appearWhole) RemoteIterators.toList(fs.listFiles(root, true)).asScala.toSeq
        else fs.listStatus(root).toSeq.filter(_.isDirectory).flatMap(round => fs.listStatus(round.getPath))
      listed.flatMap(f => Parsing.long(f.getPath.getParent.getName).map(_ -> f)).groupBy(_._1).map {
        case (round, inRound) => round -> RoundRecordsLog.roundFiles(inRound.map(_._2))
      }
    } catch {
      // Nothing logged yet, or a round was deleted while it was being listed: then list again.
      case _: FileNotFoundException => if (fs.exists(root)) rounds() else Map.empty
    }

  /** The rounds the log holds files of: one listing of the log's own directory. */
  def roundNumbers(): Set[Long] =
    try fs.listStatus(root).toSeq.filter(_.isDirectory).flatMap(d => Parsing.long(d.getPath.getName)).toSet
    catch { case _: FileNotFoundException => Set.empty }

  /** One round's files: one listing; none if the round has no files, or was deleted meanwhile. */
  def filesOf(round: Long): RoundFiles =
    try RoundRecordsLog.roundFiles(fs.listStatus(new Path(root, round.toString)).toSeq)
    catch { case _: FileNotFoundException => RoundFiles(Map.empty, None) }

  /** The records of each slot that wrote a file for `round`. */
  def read(round: Long): Map[Int, Seq[LoggedRecord]] = readParts(round).map { case (slot, parts) =>
    slot -> parts.flatten
  }

  /** The records of each slot that wrote a file for `round`, each part in order. */
  def readParts(round: Long): Map[Int, Seq[Seq[LoggedRecord]]] =
    filesOf(round).slots.map { case (slot, parts) => slot -> parts.map(readFile) }

  /**
   * The records of `round`'s batch, by slot, each record once. Two slots' files can name one record:
   * the first slot's lock lapsed before its file was there, and the second acquired it. The run that
   * ran the round gave it to the slot the driver heard from first; read back in a later run, it goes to
   * the lower slot. Either way the batch holds it once, and a sink that already committed the batch
   * skips it whole.
   */
  def readBatch(round: Long): Map[Int, Seq[LoggedRecord]] = oncePerRecord(readParts(round))

  /** [[readBatch]], once every slot that logged `round` is sealed ([[seal]]): for `after-log`. */
  def sealBatch(round: Long): Map[Int, Seq[LoggedRecord]] =
    oncePerRecord(readParts(round).map { case (slot, _) => slot -> seal(round, slot, () => ()) })

  private def oncePerRecord(parts: Map[Int, Seq[Seq[LoggedRecord]]]): Map[Int, Seq[LoggedRecord]] = {
    val taken = scala.collection.mutable.Map.empty[RecordCoordinates, List[LoggedRecord]]
    parts.toSeq.sortBy(_._1).map { case (slot, inSlot) =>
      val own = inSlot.flatMap { records =>
        val first = records.filterNot(r => taken.getOrElse(r.coordinates, Nil).exists(_.sameAs(r)))
        records.foreach(r => taken(r.coordinates) = r :: taken.getOrElse(r.coordinates, Nil))
        first
      }
      slot -> own
    }.toMap
  }

  /** The records the slot logged for `round`, all its parts', if it wrote a file. */
  def read(round: Long, slot: Int): Option[Seq[LoggedRecord]] =
    readPart(round, slot, 0).map(
      _ ++ Iterator.from(1).map(readPart(round, slot, _)).takeWhile(_.isDefined).flatten.flatten
    )

  /** The records of one part of the slot's round, if it was written. */
  def readPart(round: Long, slot: Int, part: Int): Option[Seq[LoggedRecord]] =
    try Some(parse(fs.open(partFile(round, slot, part))))
    catch { case _: FileNotFoundException => None }

  private def partFile(round: Long, slot: Int, part: Int) =
    new Path(new Path(root, round.toString), if (part == 0) s"$slot.json" else s"$slot.$part.json")
  private def releasedFile(round: Long) = new Path(new Path(root, round.toString), ReleasedFileName)

  /** Reads a listed file (handing its status over spares an object store a request for it). */
  private[acknowledgements] def readFile(file: FileStatus): Seq[LoggedRecord] =
    parse(FutureIO.awaitFuture(fs.openFile(file.getPath).withFileStatus(file).build()))

  private def parse(in: FSDataInputStream): Seq[LoggedRecord] =
    try RoundRecordsLog.fromJson(new String(in.readAllBytes(), UTF_8))
    finally in.close()

  /** Forgets a round (a replayed batch that re-reads nothing must not suppress its records' redelivery). */
  def delete(round: Long): Unit = fs.delete(new Path(root, round.toString), true)

  /**
   * Deletes the files of rounds up to `through` whose every record Kafka will never deliver again: it
   * lies below its share-partition's start offset, or its topic is gone (deleted, and maybe made again
   * under its name with another id); returns how many records the log still remembers.
   *
   * @param topicsGone of the (topic, id) pairs the log names, those whose topic is gone
   */
  def prune(
      through: Long,
      startOffsets: Map[TopicPartition, Long],
      topicsGone: Set[(String, String)] => Set[(String, String)]
  ): Long = {
    val logged = rounds().filter(_._1 <= through).map { case (round, files) =>
      round -> files.slots.values.flatten.flatMap(readFile)
    }
    val gone = topicsGone(logged.values.flatten.flatMap(r => r.topicId.map(r.coordinates.topic -> _)).toSet)
    logged.map { case (round, records) =>
      val live = records.count { r =>
        val c = r.coordinates
        !r.topicId.exists(id => gone.contains(c.topic -> id)) &&
        startOffsets.get(new TopicPartition(c.topic, c.partition)).forall(c.offset >= _)
      }
      if (live == 0) delete(round)
      live.toLong
    }.sum
  }
}
private[sparkkafkashare] object RoundRecordsLog {
  private val mapper = new ObjectMapper()
  private val ReleasedFileName = "released.json"

  /** The delivery count written for released records: the driver's marks do not carry it. */
  private val ReleasedMark = 0

  /** A round's files, from the listing of its directory. */
  private def roundFiles(inRound: Seq[FileStatus]): RoundFiles = {
    val named = inRound.map(f => f.getPath.getName -> f).toMap
    val parts = named.toSeq.flatMap { case (name, f) => slotAndPart(name).map(_ -> f) }
    val slots = parts.groupBy(_._1._1).map { case (slot, inSlot) => slot -> inSlot.sortBy(_._1._2).map(_._2) }
    RoundFiles(slots, named.get(ReleasedFileName))
  }

  /** The slot and part a file of a round holds: `<slot>.json` is part 0, `<slot>.<part>.json` a later one. */
  private[acknowledgements] def slotAndPart(name: String): Option[(Int, Int)] =
    Some(name).filter(_.endsWith(".json")).map(_.stripSuffix(".json").split('.')).collect {
      case Array(slot) => Parsing.int(slot).map(_ -> 0)
      case Array(slot, part) => for (s <- Parsing.int(slot); p <- Parsing.int(part).filter(_ > 0)) yield (s, p)
    }.flatten

  /** `{"records": [[topic, partition, offset, deliveryCount, topicId], ...]}`, null where unknown. */
  def toJson(records: Seq[LoggedRecord]): String = mapper.writeValueAsString(Map("records" -> records.map { r =>
    Seq[Any](r.coordinates.topic, r.coordinates.partition, r.coordinates.offset, r.deliveryCount, r.topicId.orNull).asJava
  }.asJava).asJava)

  def fromJson(json: String): Seq[LoggedRecord] =
    try {
      mapper.readTree(json).get("records").elements().asScala.map { r =>
        LoggedRecord(
          RecordCoordinates(r.get(0).asText(), r.get(1).asInt(), r.get(2).asLong()),
          r.get(3).asInt(),
          Option(r.get(4)).filterNot(_.isNull).map(_.asText())
        )
      }.toSeq
    } catch {
      case NonFatal(e) => throw new IllegalStateException(s"Unreadable kafka-share round file: ${e.getMessage}", e)
    }
}
