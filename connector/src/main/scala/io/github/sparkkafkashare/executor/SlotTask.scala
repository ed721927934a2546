package io.github.sparkkafkashare.executor

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.metrics.TaskCounts
import io.github.sparkkafkashare.security.SparkKafkaToken
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.spark.TaskContext
import org.apache.spark.sql.kafkashare.ExecutorLocality

/**
 * What a task does with its slot's consumer, whichever way it reads the round: borrows it for the
 * task, takes up what failed attempts counted here, settles what it holds of earlier rounds, replaces
 * it when its settings changed or the full group turned it away, and gives it back as the task ends.
 *
 * A failed attempt keeps its records: a retry on this consumer returns them, and one elsewhere leaves
 * them to be released as left behind. Giving them back at each failure would cost each a delivery, and
 * Kafka archives a record after share.delivery.count.limit (5 by default) of them.
 */
private[executor] final class SlotTask(
    partition: KafkaShareInputPartition,
    counts: TaskCounts,
    slotLocations: SlotLocations
) {
  val here: String = ExecutorLocality.currentExecutor()

  // The driver's settings, and a login with Spark's Kafka delegation token if this JVM holds one
  // (each login reads the newest token, so a token Spark obtains anew leaves the settings alone).
  private val config: java.util.Map[String, Object] = {
    val settings = partition.consumerConfig
    val clientId = settings(ConsumerConfig.CLIENT_ID_CONFIG) + "-" + partition.slot
    val withToken = SparkKafkaToken.withCurrentLogin(settings, settings(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG))
    (withToken + (ConsumerConfig.CLIENT_ID_CONFIG -> clientId)).asJava.asInstanceOf[java.util.Map[String, Object]]
  }

  private var borrowed =
    ShareConsumerPool.borrow(SlotKey(partition.runId, partition.slot), config, partition.groupLimits)
  TaskContext.get().addTaskFailureListener((_, _) => ShareConsumerPool.keepUnreported(borrowed.key, counts.byMetric))
  counts.addAll(ShareConsumerPool.takeUnreported(borrowed.key))
  slotLocations.add(SlotRead(partition.slot, partition.round, here))

  /** The slot, which the task holds. */
  def slot: ShareConsumerSlot = borrowed

  /**
   * Settles what the slot holds by the round the batch's start offset says is committed, has
   * consumers of the run left behind here release theirs, and sends the acknowledgements on their
   * own, not with the poll: if the broker refuses some (their locks expired), a fetch carrying them
   * has been seen to hand the same records back to this client again and again.
   */
  def settle(): Unit = counts.timed(_.acknowledgeNanos) {
    val settled =
      borrowed.settle(partition.committedThrough, partition.marks, atHome = partition.home.forall(_ == here))
    counts.addAll(ShareConsumerPool.releaseLeftBehind(
      partition.runId,
      partition.homes,
      here,
      partition.committedThrough
    ))
    if (settled.accepted + settled.released + settled.rejected > 0) borrowed.flush(ShareConsumerPool.CloseTimeout)
  }

  /** The slot, ready to poll: its consumer replaced if its settings changed or the full group turned it away. */
  def readyToPoll(): ShareConsumerSlot = {
    if (borrowed.config != config || borrowed.turnedAwayAsGroupFull) {
      counts.addAll(borrowed.drainAcknowledgementEvents().byMetric)
      borrowed = ShareConsumerPool.replace(borrowed, config, partition.groupLimits)
    }
    borrowed
  }

  /**
   * As the task ends: reports what the consumer holds of the round until the slot's next task (should
   * its executor be lost meanwhile, the records come back to the group as their locks expire, and a
   * drain reads them again; under after-log, only a part not yet ACCEPTed), and gives the slot back
   * (not held if replacing the consumer failed after giving the old one up).
   */
  def end(): Unit = {
    slotLocations.add(SlotRead(partition.slot, partition.round, here, borrowed.heldCount(partition.round)))
    if (borrowed.lock.isHeldByCaller) ShareConsumerPool.giveBack(borrowed)
  }
}
