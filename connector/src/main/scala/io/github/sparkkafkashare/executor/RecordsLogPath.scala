package io.github.sparkkafkashare.executor

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{DeliveredRecordsIndex, LoggedRecord, RecordCoordinates, RoundRecordsLog}
import io.github.sparkkafkashare.runs.RunLookUp
import org.apache.kafka.clients.consumer.ConsumerRecord
import org.apache.kafka.common.TopicPartition
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.kafkashare.QueryRunRegistry

/**
 * `checkpoint-dedup` and `two-phase-commit` on the executor: a round's records are logged in the
 * checkpoint ([[RoundRecordsLog]]) before the first row leaves the task. Redeliveries of records an
 * earlier round handed to Spark are ACCEPTed and dropped; the first evaluation of a slot's round to
 * log decides what the slot hands over, and a record that a slot which logged the round before it
 * names too is that slot's (both acquired it: the first one's lock lapsed before its file was there).
 * An evaluation whose consumer holds other records than the log names RELEASEs them and reads the
 * logged ones back by their coordinates.
 */
private[executor] class RecordsLogPath(log: RoundRecordsLog) extends ExactlyOncePath with Logging {

  override def polled(
      round: SlotRound,
      records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Iterator[InternalRow] =
    dropDuplicatesAndLog(round, records)

  override def heldAgain(
      round: SlotRound,
      held: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Iterator[InternalRow] =
    round.inRecordsLog(log.read(round.partition.round, round.partition.slot)) match {
      // The attempt that polled failed before checking and logging them (it counted them).
      case None => dropDuplicatesAndLog(round, held)
      case Some(logged) => returnLogged(round, logged, held)
    }

  override def readElsewhere(partition: KafkaShareInputPartition): Option[Seq[LoggedRecord]] =
    log.read(partition.round, partition.slot).map { logged =>
      val others = loggedFirstElsewhere(partition, 0, logged)
      logged.filterNot(r => others.contains(r.coordinates))
    }

  /**
   * Drops redeliveries of records that earlier rounds handed to Spark (ACCEPTed at once), logs the
   * rest, and returns the rows of what the batch takes from this slot.
   */
  private def dropDuplicatesAndLog(
      round: SlotRound,
      polled: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Iterator[InternalRow] = {
    val (partition, slot, counts) = (round.partition, round.slot, round.counts)
    val kept = dropDelivered(round, polled)
    // Even none: an evaluation of this round elsewhere must find none too.
    val logged = loggedRecords(round, kept)
    round.inRecordsLog(logFirst(partition, logged, part = 0)) match {
      case None =>
        val others = round.inRecordsLog(loggedFirstElsewhere(partition, 0, logged))
        counts.add(_.deduplicated, others.size)
        round.rows(if (others.isEmpty) kept else slot.hide(partition.round, others))
      case Some(first) => returnLogged(round, first, kept)
    }
  }

  /**
   * Takes redeliveries of records that earlier rounds handed to Spark out of `polled`, ACCEPTing
   * them at once, and returns the rest. Every record is checked, not only those with deliveryCount > 1:
   * a broker restart redelivers records it had handed out with their delivery count back at 1.
   */
  protected def dropDelivered(
      round: SlotRound,
      polled: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = {
    val partition = round.partition
    val delivered = round.inRecordsLog(
      DeliveredRecordsIndex.forRun(partition.runId, log).deliveredBefore(partition.round, loggedRecords(round, polled))
    )
    round.counts.add(_.deduplicated, delivered.size)
    if (delivered.isEmpty) polled else round.acknowledging(round.slot.acceptDelivered(partition.round, delivered))
  }

  /**
   * Logs `records` as the slot's `part` of its round unless an attempt logged that part first
   * ([[RoundRecordsLog.writeFirst]]: None, or the records logged first), and tells this JVM's index
   * what the part holds, so that it does not read the file back.
   */
  protected def logFirst(
      partition: KafkaShareInputPartition,
      records: Seq[LoggedRecord],
      part: Int
  ): Option[Seq[LoggedRecord]] = {
    val first = log.writeFirst(partition.round, partition.slot, records, fence(partition), part)
    DeliveredRecordsIndex.forRun(partition.runId, log).logged(
      partition.round,
      partition.slot,
      part,
      first.getOrElse(records)
    )
    first
  }

  /** Fails a write of the partition's round by an attempt that its query run no longer waits for. */
  protected def fence(partition: KafkaShareInputPartition): () => Unit =
    () => RecordsLogPath.fenceLateAttempt(partition.runId, partition.slot, partition.round)

  /**
   * The rows of the slot's round as its log file holds them, less what slots that logged the round
   * before it hand over. Records this consumer holds for the round that the file does not name were
   * never the batch's: they are RELEASEd, and the batch's records read back by their coordinates (the
   * consumer that acquired them settles them, or they come back and are dropped as delivered).
   */
  private def returnLogged(
      round: SlotRound,
      logged: Seq[LoggedRecord],
      held: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Iterator[InternalRow] = {
    val (partition, slot, counts) = (round.partition, round.slot, round.counts)
    val others = round.inRecordsLog(loggedFirstElsewhere(partition, 0, logged))
    val batch = logged.filterNot(r => others.contains(r.coordinates))
    val (batchSet, heldSet) = (batch.map(_.coordinates).toSet, held.asScala.map(RecordCoordinates.of).toSet)
    if (batchSet == heldSet) round.rows(held)
    else if (batchSet.subsetOf(heldSet) && (heldSet -- batchSet).subsetOf(others)) {
      counts.add(_.deduplicated, heldSet.size - batchSet.size)
      round.rows(slot.hide(partition.round, heldSet -- batchSet))
    } else {
      readBackInstead(round, batch)
    }
  }

  /**
   * The rows of `batch`, the records an evaluation of the slot's round logged, read back by their
   * coordinates, for an evaluation whose consumer holds other records than the batch: it RELEASEs
   * what it holds of the round (they were never the batch's), and the consumer that acquired the
   * batch's records settles them, or they come back and are dropped as delivered.
   */
  protected def readBackInstead(round: SlotRound, batch: Seq[LoggedRecord]): Iterator[InternalRow] = {
    val (partition, slot, counts) = (round.partition, round.slot, round.counts)
    logWarning(s"Slot ${partition.slot}, round ${partition.round}: another evaluation of the batch logged other " +
      s"records than this consumer holds; those are released and the ${batch.size} logged ones read back.")
    round.acknowledging(slot.releaseRound(partition.round, ShareConsumerPool.CloseTimeout))
    val readBack = new KafkaShareReplayReader(
      partition.round,
      partition.slot,
      batch,
      partition.consumerConfig,
      partition.includeHeaders,
      counts
    )
    Iterator.continually(readBack.next()).takeWhile(identity).map(_ => readBack.get())
  }

  /**
   * Of `records`, which the slot logged as `part` of its round, those that a part which told the driver
   * it logged the round before this one names too: the batch takes them from that part. The driver
   * orders the parts as they tell it, after their files are written, so each part reads the files of
   * those before it and none reads a file that is not whole. Without the driver's order (another copy
   * of the connector answers) none are found: the batch may then hold such a record twice.
   */
  protected def loggedFirstElsewhere(
      partition: KafkaShareInputPartition,
      part: Int,
      records: Seq[LoggedRecord]
  ): Set[RecordCoordinates] =
    if (records.isEmpty) Set.empty
    else QueryRunRegistry.loggedBefore(partition.runId, partition.round, partition.slot, part).fold(
      Set.empty[RecordCoordinates]
    ) {
      parts => DeliveredRecordsIndex.forRun(partition.runId, log).loggedBy(partition.round, parts, records)
    }

  /** The round's records as the log names them, with the ids of the topics the broker delivered them under. */
  protected def loggedRecords(
      round: SlotRound,
      records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Seq[LoggedRecord] = {
    val topicIds = round.slot.topicIds(round.partition.round)
    records.asScala.toSeq.map { r =>
      LoggedRecord(
        RecordCoordinates.of(r),
        KafkaShareRows.deliveryCount(r),
        topicIds.get(new TopicPartition(r.topic(), r.partition()))
      )
    }
  }
}

private[sparkkafkashare] object RecordsLogPath {

  /**
   * Fails the task unless the driver says its query run still runs and has not committed `round`: an
   * attempt that Spark wrote off (its executor lost, the run stopped, its driver gone) and that still
   * runs must not log a round that is decided, whose files the run, or the next one, may have replayed
   * or pruned. Its records would then count as delivered when they come back.
   */
  def fenceLateAttempt(runId: String, slot: Int, round: Long): Unit =
    mayLog(runId, slot, round, QueryRunRegistry.lookUp(runId)) match {
      case Left(why) => throw new IllegalStateException(why)
      case Right(()) =>
    }

  /** What becomes of records a task polled and could not log: no batch reads them (`HeldRecords.inParts`). */
  private val NotLoggedRecords =
    "no batch reads them, and the consumer releases them when its slot settles next or closes."

  /**
   * Whether a task may log `round` by what the driver said of its run, or why not. A driver that does
   * not know the run at all (another copy of the connector answers) cannot say, and the write goes ahead.
   */
  def mayLog(runId: String, slot: Int, round: Long, run: RunLookUp): Either[String, Unit] = run match {
    case RunLookUp.Running(state) if round > state.committedThrough => Right(())
    case RunLookUp.Unknown => Right(())
    case RunLookUp.Running(state) => Left(
        s"Slot $slot, round $round: query run $runId committed through round " +
          s"${state.committedThrough}, so this late attempt's records are not logged; $NotLoggedRecords"
      )
    case ended => Left(s"Slot $slot, round $round: query run $runId is not running ($ended), so its records are not " +
        s"logged; $NotLoggedRecords")
  }
}
