package io.github.sparkkafkashare.executor

import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.RecordCoordinates
import io.github.sparkkafkashare.metrics.KafkaShareTaskMetric
import org.apache.kafka.clients.consumer.AcknowledgementCommitCallback
import org.apache.kafka.common.TopicIdPartition
import org.apache.kafka.common.errors.InvalidRecordStateException

/**
 * Counts what became of one share consumer's acknowledgements and lock renewals. Kafka's client
 * calls it from the consumer's own calls (poll, commitSync, close), with their results.
 */
private[executor] final class AcknowledgementOutcomes extends AcknowledgementCommitCallback {
  private val renewed = new AtomicLong()
  private val expired = new AtomicLong()
  private val failed = new AtomicLong()

  /**
   * Records whose RENEW was sent and whose answer has not reached the callback: the renewal itself
   * counts what it kept and lost ([[renewalEnded]]), so the callback only tells them from other acknowledgements.
   */
  private val renewals = java.util.concurrent.ConcurrentHashMap.newKeySet[RecordCoordinates]()

  /** RENEW was sent for `records`. */
  def renewing(records: Iterable[RecordCoordinates]): Unit = records.foreach(renewals.add)

  override def onComplete(
      offsets: java.util.Map[TopicIdPartition, java.util.Set[java.lang.Long]],
      e: Exception
  ): Unit = {
    val others = offsets.asScala.toSeq.flatMap { case (tp, set) =>
      set.asScala.map(o => RecordCoordinates(tp.topic(), tp.partition(), o))
    }.filterNot(renewals.remove)
    e match {
      case null =>
      // The broker refuses an acknowledgement with INVALID_RECORD_STATE when this member no longer
      // holds the record: its lock expired and the group may already have delivered it elsewhere.
      case _: InvalidRecordStateException => expired.addAndGet(others.size)
      // Any other failure leaves the records acquired until their lock expires; then they come back.
      case _ => failed.addAndGet(others.size)
    }
  }

  /**
   * A renewal ended: `renewed` records came back to its poll with their locks renewed, and `lost`
   * did not (refused, or not answered in time). The slot can no longer acknowledge the lost ones,
   * whatever the broker answers later: even a late renewal that succeeds only hands them to a later
   * poll, so they count as locks lost now, once.
   */
  def renewalEnded(renewed: Int, lost: Int): Unit = {
    this.renewed.addAndGet(renewed)
    expired.addAndGet(lost)
  }

  /** Records the slot meant to acknowledge but the client no longer holds: their locks are lost to it. */
  def notHeld(records: Int): Unit = expired.addAndGet(records)

  /** What happened since the last call. */
  def drain(): AcknowledgementEvents =
    AcknowledgementEvents(renewed.getAndSet(0), expired.getAndSet(0), failed.getAndSet(0))
}

/**
 * What happened to a slot's acknowledgements and locks since a task last asked, for it to report as
 * metrics: records whose lock was renewed; records whose acknowledgement the broker refused because
 * the lock had expired; records whose acknowledgement was not applied for another reason.
 */
private[sparkkafkashare] final case class AcknowledgementEvents(renewed: Long, expired: Long, failed: Long) {
  def byMetric: Map[KafkaShareTaskMetric, Long] = Map(
    KafkaShareTaskMetric.LockRenewals -> renewed,
    KafkaShareTaskMetric.LocksExpired -> expired,
    KafkaShareTaskMetric.AcknowledgementsFailed -> failed
  )
}
