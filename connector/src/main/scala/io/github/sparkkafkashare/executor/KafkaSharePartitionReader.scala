package io.github.sparkkafkashare.executor

import java.time.Duration

import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, TaskCounts}
import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader

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

  /** Borrows the slot for the task, and reads its round. */
  private def readRound(): Iterator[InternalRow] = {
    val task = new SlotTask(partition, counts, slotLocations)
    TaskContext.get().addTaskCompletionListener[Unit](_ => task.end())
    val roundRows = task.slot.heldFor(partition.round) match {
      // Spark evaluates this batch again (a retry, or foreachBatch using its DataFrame twice): same records.
      case Some(held) => path.heldAgain(new SlotRound(partition, task.slot, counts), held)
      case None =>
        task.settle()
        if (!partition.poll) {
          counts.timed(_.acknowledgeNanos)(task.slot.flush(ShareConsumerPool.CloseTimeout))
          Iterator.empty
        } else {
          val slot = task.readyToPoll()
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
    counts.addAll(task.slot.drainAcknowledgementEvents().byMetric)
    roundRows
  }
}
