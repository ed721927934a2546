package io.github.sparkkafkashare.executor

import java.time.Duration

import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, TaskCounts}
import io.github.sparkkafkashare.options.AcceptPoint
import org.apache.kafka.clients.consumer.ConsumerRecord
import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric

/**
 * One slot's task in real-time mode: it polls and hands out records until its batch's deadline, and
 * acknowledges them itself, since a real-time batch lasts minutes and its records cannot wait for its
 * commit. Spark asks for the next row only once the query has processed the last one, and the task
 * completes once its sink has committed what it wrote. Spark closes the reader earlier, as the rows
 * run out, so the task's completion, not the reader's close, settles the records.
 *
 *  - [[AcceptPoint.AfterRow]]: once every row of a poll has gone through the query, its records are
 *    ACCEPTed with the next poll, which waits up to the deadline for records.
 *  - [[AcceptPoint.AfterTask]]: the task polls once, waiting up to `pollTimeoutMs`, hands the poll's
 *    rows out, and ends; its records are ACCEPTed as it completes. Kafka takes no next poll before the
 *    last one's records are acknowledged, so each batch holds one poll per consumer.
 *
 * A task that fails RELEASEs what it has not ACCEPTed; a lost executor's records come back as their
 * locks expire. Either way the group delivers them again: at least once.
 */
private[sparkkafkashare] final class RealTimeRound(
    partition: KafkaShareInputPartition,
    metrics: KafkaShareSourceMetrics,
    slotLocations: SlotLocations,
    acceptPoint: AcceptPoint
) {
  private val counts = new TaskCounts(metrics)
  private var task: Option[SlotTask] = None
  private var records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = java.util.List.of()
  private var handedOut = 0
  private var polled = false

  /** Moves to the next record, waiting for one until `deadlineMs` (wall clock); false once the task is to end. */
  def next(deadlineMs: Long): Boolean =
    if (handedOut < records.size) { handedOut += 1; true }
    else if (polled && acceptPoint == AcceptPoint.AfterTask) false
    else {
      val slot = borrowed()
      if (handedOut > 0) slot.acceptProcessed(partition.round, handedOut) // every row of the poll went through
      records = poll(slot, deadlineMs)
      handedOut = 0
      !records.isEmpty && { handedOut = 1; true }
    }

  def row: InternalRow = {
    val r = records.get(handedOut - 1)
    KafkaShareRows.toRow(r, partition.includeHeaders, KafkaShareRows.deliveryCount(r))
  }

  /** The current record's timestamp: when it was created, or appended to its partition. */
  def timestampMs: Long = records.get(handedOut - 1).timestamp()

  def metricsValues: Array[CustomTaskMetric] = counts.values

  /** The slot, borrowed for the task the first time, settled, and settled again as the task completes. */
  private def borrowed(): ShareConsumerSlot = task.getOrElse {
    val t = new SlotTask(partition, counts, slotLocations)
    task = Some(t)
    TaskContext.get().addTaskCompletionListener[Unit](completed(_, t))
    t.settle()
    t
  }.slot

  /**
   * As the task completes, after its sink committed: ACCEPTs what it handed out and has not ACCEPTed,
   * and RELEASEs the rest (all of it if the task failed: its sink may not have written those rows),
   * waits for the broker's answer, and gives the slot back. An interrupted task (the query stopping)
   * cannot use the consumer: its records stay held until the slot settles next or closes, which
   * RELEASEs them.
   */
  private def completed(context: TaskContext, t: SlotTask): Unit =
    try {
      val slot = t.slot
      if (slot.holds(partition.round) && !Thread.currentThread().isInterrupted) {
        val succeeded = !(context.isFailed() || context.isInterrupted())
        counts.timed(_.acknowledgeNanos) {
          slot.acceptProcessed(partition.round, if (succeeded) handedOut else 0)
          slot.flush(ShareConsumerPool.CloseTimeout)
        }
      }
      counts.addAll(slot.drainAcknowledgementEvents().byMetric)
    } finally t.end()

  /** Polls until records arrive, up to the deadline (`after-task`: up to `pollTimeoutMs` too). */
  private def poll(
      slot: ShareConsumerSlot,
      deadlineMs: Long
  ): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = {
    val untilMs =
      if (acceptPoint == AcceptPoint.AfterTask)
        math.min(deadlineMs, System.currentTimeMillis() + partition.pollTimeoutMs)
      else deadlineMs
    def left = Duration.ofMillis(math.max(0L, untilMs - System.currentTimeMillis()))
    val polledNow = counts.timed(_.pollNanos) {
      if (polled) slot.pollPart(partition.round, left)
      else {
        val ready = task.get.readyToPoll()
        val joins = ready.joinsWithNextPoll(partition.topics)
        val first = ready.pollRound(partition.round, partition.topics, left, inParts = true)
        if (joins && !ready.turnedAwayAsGroupFull) counts.add(_.joined, 1)
        polled = true
        // A first poll ends once the consumer joined and fetched; a part's poll waits out the rest.
        if (first.isEmpty && untilMs > System.currentTimeMillis()) ready.pollPart(partition.round, left) else first
      }
    }
    counts.addAll(task.get.slot.drainAcknowledgementEvents().byMetric)
    new SlotRound(partition, task.get.slot, counts).acquired(polledNow)
  }
}
