package io.github.sparkkafkashare.acknowledgements

import java.nio.charset.StandardCharsets.UTF_8

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.hadoop.fs.{FileSystem, Path}
import org.apache.kafka.common.TopicPartition
import org.apache.spark.util.SerializableConfiguration

/** A record a round handed to Spark, with the delivery count it had then. */
private[sparkkafkashare] final case class LoggedRecord(coordinates: RecordCoordinates, deliveryCount: Int)

/**
 * The coordinates of the records each round handed to Spark, one file per slot under
 * `<checkpoint>/sources/<n>/kafka-share-rounds/<round>/<slot>.json`, for the `checkpoint-dedup` and
 * `two-phase-commit` strategies.
 *
 * The task writes its file after polling and before any row reaches the sink, so the file is
 * durable before the batch can commit: a later run can tell which records a committed (or
 * replayed) batch held, drop their redeliveries, and, for `two-phase-commit`, read a replayed
 * batch's records back by their coordinates. A failed attempt's file is replaced by the next
 * attempt's, so records a failed attempt released are not remembered.
 *
 * Files are small: a round holds at most what the consumers acquired in it, and the driver deletes
 * files whose records all lie below their share-partition start offset (never delivered again).
 */
private[sparkkafkashare] final class RoundRecordsLog(val dir: String, hadoopConf: SerializableConfiguration)
  extends Serializable {

  @transient private lazy val root = new Path(dir)
  @transient private lazy val fs: FileSystem = root.getFileSystem(hadoopConf.value)

  /** Replaces the slot's file for `round` with `records` (written to a temporary file, then renamed). */
  def write(round: Long, slot: Int, records: Seq[LoggedRecord]): Unit = {
    val target = slotFile(round, slot)
    val temporary = new Path(target.getParent, s".$slot.json.${java.util.UUID.randomUUID()}.tmp")
    val out = fs.create(temporary, true)
    try out.write(RoundRecordsLog.toJson(records).getBytes(UTF_8)) finally out.close()
    if (fs.exists(target)) fs.delete(target, false)
    if (!fs.rename(temporary, target)) throw new java.io.IOException(s"could not rename $temporary to $target")
  }

  /** The rounds that have files, oldest first. */
  def rounds(): Seq[Long] =
    if (!fs.exists(root)) Nil
    else fs.listStatus(root).toSeq.map(_.getPath.getName).flatMap(_.toLongOption).sorted

  /** The records of each slot that wrote a file for `round` (of the `slots` wanted). */
  def read(round: Long, slots: Int => Boolean = _ => true): Map[Int, Seq[LoggedRecord]] = {
    val roundDir = new Path(root, round.toString)
    if (!fs.exists(roundDir)) Map.empty
    else fs.listStatus(roundDir).toSeq.map(_.getPath).filter(_.getName.endsWith(".json")).filterNot(_.getName.startsWith("."))
      .map(path => path.getName.stripSuffix(".json").toInt -> path).filter { case (slot, _) => slots(slot) }
      .map { case (slot, path) => slot -> readFile(path) }.toMap
  }

  /** The records the slot logged for `round`, if it wrote a file. */
  def read(round: Long, slot: Int): Option[Seq[LoggedRecord]] = {
    val path = slotFile(round, slot)
    if (fs.exists(path)) Some(readFile(path)) else None
  }

  def contains(round: Long, slot: Int): Boolean = fs.exists(slotFile(round, slot))

  private def slotFile(round: Long, slot: Int) = new Path(new Path(root, round.toString), s"$slot.json")

  private def readFile(path: Path): Seq[LoggedRecord] = {
    val in = fs.open(path)
    try RoundRecordsLog.fromJson(new String(in.readAllBytes(), UTF_8)) finally in.close()
  }

  /** Forgets a round (a replayed batch that re-reads nothing must not suppress its records' redelivery). */
  def delete(round: Long): Unit = fs.delete(new Path(root, round.toString), true)

  /**
   * Deletes the files of rounds up to `through` whose every record lies below its share-partition's
   * start offset; returns how many records the log still remembers.
   */
  def prune(through: Long, startOffsets: Map[TopicPartition, Long]): Long =
    rounds().filter(_ <= through).map { round =>
      val files = read(round)
      val live = files.values.flatten.count { r =>
        startOffsets.get(new TopicPartition(r.coordinates.topic, r.coordinates.partition)).forall(r.coordinates.offset >= _)
      }
      if (live == 0) delete(round)
      live.toLong
    }.sum
}

private[sparkkafkashare] object RoundRecordsLog {
  private val mapper = new ObjectMapper()

  /** `{"records": [[topic, partition, offset, deliveryCount], ...]}` */
  def toJson(records: Seq[LoggedRecord]): String = mapper.writeValueAsString(Map("records" -> records.map { r =>
    Seq[Any](r.coordinates.topic, r.coordinates.partition, r.coordinates.offset, r.deliveryCount).asJava
  }.asJava).asJava)

  def fromJson(json: String): Seq[LoggedRecord] = try {
    mapper.readTree(json).get("records").elements().asScala.map { r =>
      LoggedRecord(RecordCoordinates(r.get(0).asText(), r.get(1).asInt(), r.get(2).asLong()), r.get(3).asInt())
    }.toSeq
  } catch {
    case NonFatal(e) => throw new IllegalStateException(s"Unreadable kafka-share round file: ${e.getMessage}", e)
  }
}

/**
 * An executor's view of the log, to drop redeliveries of records that an earlier round (or another
 * slot in the same round) already handed to Spark. Each check of earlier rounds lists the log and
 * reads only the rounds it has not read yet; rounds already read are kept, and forgotten once
 * pruned from the log.
 */
private[sparkkafkashare] final class DeliveredRecordsIndex(log: RoundRecordsLog) {
  private var byRound = Map.empty[Long, Set[RecordCoordinates]]

  /** Those of `candidates` that a round before `round` handed to Spark. */
  def deliveredBefore(round: Long, candidates: Seq[RecordCoordinates]): Set[RecordCoordinates] = synchronized {
    if (candidates.isEmpty) Set.empty
    else {
      val onDisk = log.rounds().filter(_ < round).toSet
      byRound = byRound.filter { case (r, _) => onDisk.contains(r) } ++
        (onDisk -- byRound.keySet).map(r => r -> log.read(r).values.flatten.map(_.coordinates).toSet)
      candidates.filter(c => byRound.valuesIterator.exists(_.contains(c))).toSet
    }
  }

  /**
   * Those of `candidates` that another slot logged for `round` itself: an executor died with them,
   * the broker gave them to this slot, and the other slot's retry reads them back from its log.
   * Read afresh, since the round's files are still being written.
   */
  def loggedByOtherSlots(round: Long, slot: Int, candidates: Seq[RecordCoordinates]): Set[RecordCoordinates] =
    if (candidates.isEmpty) Set.empty
    else {
      val others = log.read(round, _ != slot).values.flatten.map(_.coordinates).toSet
      candidates.filter(others.contains).toSet
    }
}

private[sparkkafkashare] object DeliveredRecordsIndex {
  private val byRun = new java.util.concurrent.ConcurrentHashMap[String, DeliveredRecordsIndex]()

  /** This JVM's index for a query run. */
  def forRun(runId: String, log: RoundRecordsLog): DeliveredRecordsIndex =
    byRun.computeIfAbsent(runId, _ => new DeliveredRecordsIndex(log))

  def forget(runId: String): Unit = byRun.remove(runId)
}
