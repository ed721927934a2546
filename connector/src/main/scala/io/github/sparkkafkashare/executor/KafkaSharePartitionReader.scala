package io.github.sparkkafkashare.executor

import java.time.Duration

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{DeliveredRecordsIndex, LoggedRecord, RecordCoordinates, RoundRecordsLog}
import io.github.sparkkafkashare.metrics.{KafkaShareCountMetric, KafkaShareSourceMetrics, TaskCounts}
import org.apache.kafka.clients.consumer.{ConsumerConfig, ConsumerRecord}
import org.apache.kafka.common.TopicPartition
import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.kafkashare.{ExecutorLocality, QueryRunRegistry, RunLookUp}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader

/**
 * Runs one slot's round on an executor: settles what the slot's consumer holds from earlier
 * rounds, then polls once and returns those records as rows, leaving them unacknowledged until
 * a later round learns that this batch committed. A failed attempt keeps what it acquired, for the
 * retry to return the same records.
 *
 * With a records log, redeliveries of records an earlier round handed to Spark are ACCEPTed and
 * dropped, those another slot logged for this round are held but not returned, and the
 * coordinates of the rest are logged before the first row leaves; a failed attempt
 * keeps what it acquired, for the retry to return the same records. The first evaluation of the
 * slot's round to log its records decides what the batch holds: an evaluation whose consumer holds
 * other records (its attempt failed before logging them, and a retry elsewhere logged its own) RELEASEs
 * them and reads the logged ones back by their coordinates.
 */
private[sparkkafkashare] final class KafkaSharePartitionReader(
    partition: KafkaShareInputPartition,
    metrics: KafkaShareSourceMetrics,
    slotLocations: SlotLocations,
    recordsLog: Option[RoundRecordsLog])
  extends PartitionReader[InternalRow] with Logging {

  private val counts = new TaskCounts(metrics)

  private val consumerConfig = {
    val config = partition.consumerConfig
    val clientId = config(ConsumerConfig.CLIENT_ID_CONFIG) + "-" + partition.slot
    (config + (ConsumerConfig.CLIENT_ID_CONFIG -> clientId)).asJava.asInstanceOf[java.util.Map[String, Object]]
  }
  /** Borrowed for the task; replaced before the poll if the round's consumer settings changed. */
  private var slot = ShareConsumerPool.borrow(SlotKey(partition.runId, partition.slot), consumerConfig,
    partition.groupLimits)

  private val rows: Iterator[InternalRow] = {
    val context = TaskContext.get()
    // Not held if replacing the slot failed after giving the old one up.
    context.addTaskCompletionListener[Unit](_ => if (slot.lock.isHeldByCaller) ShareConsumerPool.giveBack(slot))
    // A failed attempt keeps its records: a retry on this consumer returns them, and one elsewhere
    // leaves them to be released as left behind. Giving them back at each failure would cost each a
    // delivery, and Kafka archives a record after share.delivery.count.limit (5 by default) of them.
    context.addTaskFailureListener((_, _) => ShareConsumerPool.keepUnreported(slot.key, counts.byMetric))
    counts.addAll(ShareConsumerPool.takeUnreported(slot.key))
    val here = ExecutorLocality.currentExecutor()
    slotLocations.add(SlotRead(partition.slot, partition.round, here))
    slot.heldFor(partition.round) match {
      // Spark evaluates this batch again (a retry, or foreachBatch using its DataFrame twice): same records.
      case Some(held) =>
        recordsLog match {
          case Some(log) => log.read(partition.round, partition.slot) match {
            // The attempt that polled failed before checking and logging them (it counted them).
            case None => dropDuplicatesAndLog(log, held)
            case Some(logged) => returnLogged(log, logged, held)
          }
          case None => toRows(held)
        }
      case None =>
        val settled = slot.settle(partition.committedThrough, partition.marks, atHome = partition.home.forall(_ == here))
        counts.add(_.accepted, settled.accepted)
        counts.add(_.released, settled.released)
        counts.add(_.rejected, settled.rejected)
        counts.addAll(ShareConsumerPool.releaseLeftBehind(partition.runId, partition.homes, here,
          partition.committedThrough))
        // Sent on their own, not with the poll: if the broker refuses some (their locks expired), a
        // fetch carrying them has been seen to hand the same records back to this client again and again.
        if (settled.accepted + settled.released + settled.rejected > 0) slot.flush(ShareConsumerPool.CloseTimeout)
        if (partition.poll && (slot.config != consumerConfig || slot.turnedAwayAsGroupFull)) {
          counts.addAll(slot.drainAcknowledgementEvents().byMetric)
          slot = ShareConsumerPool.replace(slot, consumerConfig, partition.groupLimits)
        }
        if (partition.poll) {
          // A first poll may end before the records assigned to it arrive, so the driver takes no round
          // a consumer joined in as showing partitions empty; one the full group turned away never joined.
          val joins = slot.joinsWithNextPoll(partition.topics)
          val polled = slot.pollRound(partition.round, partition.topics, Duration.ofMillis(partition.pollTimeoutMs))
          if (joins && !slot.turnedAwayAsGroupFull) counts.add(_.joined, 1)
          counts.addAll(acquisitions(polled))
          recordsLog.fold(toRows(polled))(log => dropDuplicatesAndLog(log, polled))
        } else {
          slot.flush(ShareConsumerPool.CloseTimeout)
          Iterator.empty
        }
    }
  }

  // After the settlement and the poll above, so that the results of the acknowledgements they sent
  // count in this task; what happened between tasks (the lock renewer's work) counts here too.
  counts.addAll(slot.drainAcknowledgementEvents().byMetric)
  // What the consumer now holds until the slot's next task: should its executor be lost meanwhile,
  // the records come back to the group as their locks expire, and a drain reads them again.
  slotLocations.add(SlotRead(partition.slot, partition.round, ExecutorLocality.currentExecutor(), slot.heldCount(partition.round)))

  private def acquisitions(records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Map[KafkaShareCountMetric, Long] =
    Map(KafkaShareCountMetric.Acquired -> records.size.toLong,
      KafkaShareCountMetric.Redelivered -> records.asScala.count(r => KafkaShareRows.deliveryCount(r) > 1).toLong)

  /**
   * Drops redeliveries of records that earlier rounds handed to Spark (ACCEPTed at once), logs the
   * rest, and returns the rows of what the batch takes from this slot. The first evaluation of the
   * slot's round to log decides what the slot hands over; of that, a record that a slot which logged
   * the round before this one names too stays held but out of the rows (its lock lapsed while the
   * other slot's file was being written, and the other slot acquired it again).
   */
  private def dropDuplicatesAndLog(
      log: RoundRecordsLog,
      polled: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Iterator[InternalRow] = {
    // Every record is checked, not only those with deliveryCount > 1: a broker restart redelivers
    // records it had handed out with their delivery count back at 1.
    val delivered = DeliveredRecordsIndex.forRun(partition.runId, log)
      .deliveredBefore(partition.round, loggedRecords(polled))
    val kept = if (delivered.isEmpty) polled else slot.acceptDelivered(partition.round, delivered)
    counts.add(_.deduplicated, delivered.size)
    counts.add(_.accepted, delivered.size) // acceptDelivered ACCEPTed these
    // Even none: an evaluation of this round elsewhere must find none too.
    val fence = () => KafkaSharePartitionReader.fenceLateAttempt(partition.runId, partition.slot, partition.round)
    val logged = loggedRecords(kept)
    log.writeFirst(partition.round, partition.slot, logged, fence) match {
      case None =>
        val others = KafkaSharePartitionReader.loggedFirstElsewhere(log, partition, logged)
        counts.add(_.deduplicated, others.size)
        toRows(if (others.isEmpty) kept else slot.hide(partition.round, others))
      case Some(first) => returnLogged(log, first, kept)
    }
  }

  /**
   * The rows of the slot's round as its log file holds them, less what slots that logged the round
   * before it hand over. Records this consumer holds for the round that the file does not name were
   * never the batch's: they are RELEASEd, and the batch's records read back by their coordinates (the
   * consumer that acquired them settles them, or they come back and are dropped as delivered).
   */
  private def returnLogged(
      log: RoundRecordsLog,
      logged: Seq[LoggedRecord],
      held: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Iterator[InternalRow] = {
    val others = KafkaSharePartitionReader.loggedFirstElsewhere(log, partition, logged)
    val batch = logged.filterNot(r => others.contains(r.coordinates))
    val (batchSet, heldSet) = (batch.map(_.coordinates).toSet, held.asScala.map(RecordCoordinates.of).toSet)
    if (batchSet == heldSet) toRows(held)
    else if (batchSet.subsetOf(heldSet) && (heldSet -- batchSet).subsetOf(others)) {
      counts.add(_.deduplicated, heldSet.size - batchSet.size)
      toRows(slot.hide(partition.round, heldSet -- batchSet))
    } else {
      logWarning(s"Slot ${partition.slot}, round ${partition.round}: another evaluation of the batch logged other " +
        s"records than the ${held.size} this consumer holds; those are released and the logged ones read back.")
      counts.add(_.released, slot.releaseRound(partition.round, ShareConsumerPool.CloseTimeout).size)
      val readBack = new KafkaShareReplayReader(partition.round, partition.slot, batch, partition.consumerConfig,
        partition.includeHeaders, counts)
      Iterator.continually(readBack.next()).takeWhile(identity).map(_ => readBack.get())
    }
  }

  private def toRows(records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Iterator[InternalRow] =
    records.iterator().asScala.map(r => KafkaShareRows.toRow(r, partition.includeHeaders, KafkaShareRows.deliveryCount(r)))

  /** The round's records as the log names them, with the ids of the topics the broker delivered them under. */
  private def loggedRecords(records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Seq[LoggedRecord] = {
    val topicIds = slot.topicIds(partition.round)
    records.asScala.toSeq.map { r =>
      LoggedRecord(RecordCoordinates.of(r), KafkaShareRows.deliveryCount(r), topicIds.get(new TopicPartition(r.topic(), r.partition())))
    }
  }

  private var current: InternalRow = _

  override def next(): Boolean = rows.hasNext && { current = rows.next(); true }

  override def get(): InternalRow = current

  override def currentMetricsValues(): Array[CustomTaskMetric] = counts.values

  override def close(): Unit = () // the slot goes back to the pool when the task completes
}
private[sparkkafkashare] object KafkaSharePartitionReader {
  /**
   * Fails the task unless the driver says its query run still runs and has not committed `round`: an
   * attempt that Spark wrote off (its executor lost, the run stopped, its driver gone) and that still
   * runs must not log a round that is decided, whose files the run, or the next one, may have replayed
   * or pruned. Its records would then count as delivered when they come back. A driver that does not
   * know the run at all (another copy of the connector answers) cannot say, and the write goes ahead.
   */
  def fenceLateAttempt(runId: String, slot: Int, round: Long): Unit = QueryRunRegistry.lookUp(runId) match {
    case RunLookUp.Running(state) if round > state.committedThrough =>
    case RunLookUp.Unknown =>
    case RunLookUp.Running(state) => throw new IllegalStateException(s"Slot $slot, round $round: query run $runId " +
      s"committed through round ${state.committedThrough}, so this late attempt's records are not logged; " +
      "its consumer gives them back to the group.")
    case ended => throw new IllegalStateException(s"Slot $slot, round $round: query run $runId is not running " +
      s"($ended), so its records are not logged; its consumer gives them back to the group.")
  }

  /**
   * Of `records`, which the slot logged for its round, those that a slot which told the driver it
   * logged the round before this one names too: the batch takes them from that slot. The driver
   * orders the slots as they tell it, after their files are written, so each slot reads the files of
   * those before it and none reads a file that is not whole. Without the driver's order (another copy
   * of the connector answers) none are found: the batch may then hold such a record twice.
   */
  def loggedFirstElsewhere(log: RoundRecordsLog, partition: KafkaShareInputPartition, records: Seq[LoggedRecord])
      : Set[RecordCoordinates] =
    if (records.isEmpty) Set.empty
    else QueryRunRegistry.loggedBefore(partition.runId, partition.round, partition.slot).fold(Set.empty[RecordCoordinates]) {
      slots => DeliveredRecordsIndex.forRun(partition.runId, log).loggedBy(partition.round, slots, records)
    }
}
