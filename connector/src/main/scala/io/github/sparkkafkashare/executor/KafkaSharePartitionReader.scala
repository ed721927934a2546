package io.github.sparkkafkashare.executor

import java.time.Duration

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, TaskCounts}
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader
import org.apache.spark.sql.kafkashare.ExecutorLocality

/**
 * Runs one slot's round on an executor, from its first `next()`: settles what the slot's consumer
 * holds from earlier rounds, then polls once and returns those records as rows ([[ExactlyOncePath]]
 * decides which), leaving them unacknowledged until a later round learns that this batch committed.
 * If the consumer still holds the round (Spark evaluates the batch again), it returns the same
 * records without polling. A failed attempt keeps what it acquired, for the retry to return.
 */
private[sparkkafkashare] final class KafkaSharePartitionReader(
    partition: KafkaShareInputPartition,
    metrics: KafkaShareSourceMetrics,
    slotLocations: SlotLocations,
    path: ExactlyOncePath
) extends PartitionReader[InternalRow] {

  private val counts = new TaskCounts(metrics)
  private var rows: Iterator[InternalRow] = _ // the round's, once the first next() has read it
  private var current: InternalRow = _

  override def next(): Boolean = {
    if (rows == null) rows = readRound()
    rows.hasNext && { current = rows.next(); true }
  }

  override def get(): InternalRow = current

  override def currentMetricsValues(): Array[CustomTaskMetric] = counts.values

  override def close(): Unit = () // the slot goes back to the pool when the task completes

  private def consumerConfig: java.util.Map[String, Object] = {
    val config = partition.consumerConfig
    val clientId = config(ConsumerConfig.CLIENT_ID_CONFIG) + "-" + partition.slot
    (config + (ConsumerConfig.CLIENT_ID_CONFIG -> clientId)).asJava.asInstanceOf[java.util.Map[String, Object]]
  }

  /** Borrows the slot for the task, and reads its round. */
  private def readRound(): Iterator[InternalRow] = {
    val config = consumerConfig
    var slot = ShareConsumerPool.borrow(SlotKey(partition.runId, partition.slot), config, partition.groupLimits)
    val context = TaskContext.get()
    val here = ExecutorLocality.currentExecutor()
    context.addTaskCompletionListener[Unit] { _ =>
      // What the consumer holds as the task ends, until the slot's next task: should its executor be lost
      // meanwhile, the records come back to the group as their locks expire, and a drain reads them again.
      // Under after-log, only a part not yet ACCEPTed.
      slotLocations.add(SlotRead(partition.slot, partition.round, here, slot.heldCount(partition.round)))
      // Not held if replacing the slot failed after giving the old one up.
      if (slot.lock.isHeldByCaller) ShareConsumerPool.giveBack(slot)
    }
    // A failed attempt keeps its records: a retry on this consumer returns them, and one elsewhere
    // leaves them to be released as left behind. Giving them back at each failure would cost each a
    // delivery, and Kafka archives a record after share.delivery.count.limit (5 by default) of them.
    context.addTaskFailureListener((_, _) => ShareConsumerPool.keepUnreported(slot.key, counts.byMetric))
    counts.addAll(ShareConsumerPool.takeUnreported(slot.key))
    slotLocations.add(SlotRead(partition.slot, partition.round, here))
    val roundRows = slot.heldFor(partition.round) match {
      // Spark evaluates this batch again (a retry, or foreachBatch using its DataFrame twice): same records.
      case Some(held) => path.heldAgain(new SlotRound(partition, slot, counts), held)
      case None =>
        counts.timed(_.acknowledgeNanos)(settle(slot, here))
        if (!partition.poll) {
          counts.timed(_.acknowledgeNanos)(slot.flush(ShareConsumerPool.CloseTimeout))
          Iterator.empty
        } else {
          if (slot.config != config || slot.turnedAwayAsGroupFull) {
            counts.addAll(slot.drainAcknowledgementEvents().byMetric)
            slot = ShareConsumerPool.replace(slot, config, partition.groupLimits)
          }
          // A first poll may end before the records assigned to it arrive, so the driver takes no round
          // a consumer joined in as showing partitions empty; one the full group turned away never joined.
          val joins = slot.joinsWithNextPoll(partition.topics)
          val polled = counts.timed(_.pollNanos)(
            slot.pollRound(
              partition.round,
              partition.topics,
              Duration.ofMillis(partition.pollTimeoutMs),
              inParts = partition.afterLog.isDefined
            )
          )
          if (joins && !slot.turnedAwayAsGroupFull) counts.add(_.joined, 1)
          val slotRound = new SlotRound(partition, slot, counts)
          path.polled(slotRound, slotRound.acquired(polled))
        }
    }
    // After the settlement and the poll, so that the results of the acknowledgements they sent count
    // in this task; what happened between tasks (the lock renewer's work) counts here too.
    counts.addAll(slot.drainAcknowledgementEvents().byMetric)
    roundRows
  }

  /**
   * Settles what the slot holds by the round the batch's start offset says is committed, has
   * consumers of the run left behind here release theirs, and sends the acknowledgements on their
   * own, not with the poll: if the broker refuses some (their locks expired), a fetch carrying them
   * has been seen to hand the same records back to this client again and again.
   */
  private def settle(slot: ShareConsumerSlot, here: String): Unit = {
    val settled = slot.settle(partition.committedThrough, partition.marks, atHome = partition.home.forall(_ == here))
    counts.addAll(ShareConsumerPool.releaseLeftBehind(
      partition.runId,
      partition.homes,
      here,
      partition.committedThrough
    ))
    if (settled.accepted + settled.released + settled.rejected > 0) slot.flush(ShareConsumerPool.CloseTimeout)
  }

}
