package io.github.sparkkafkashare.executor

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.RecordCoordinates
import io.github.sparkkafkashare.metrics.KafkaShareTaskMetric
import org.apache.kafka.clients.consumer.{AcknowledgeType, AcknowledgementCommitCallback, ConsumerRecord}
import org.apache.kafka.common.TopicIdPartition
import org.apache.kafka.common.errors.InvalidRecordStateException

/**
 * Counts what became of one share consumer's acknowledgements and lock renewals, as the broker
 * answered them: an acknowledgement counts as ACCEPTed (RELEASEd, REJECTed) once the broker applied
 * it, not when it was sent. Kafka's client calls it from the consumer's own calls (poll, commitSync,
 * close), with their results.
 */
private[executor] final class AcknowledgementOutcomes extends AcknowledgementCommitCallback {
  private val renewed = new AtomicLong()
  private val expired = new AtomicLong()
  private val failed = new AtomicLong()
  private val applied = AcknowledgeType.values().map(_ -> new AtomicLong()).toMap

  /**
   * The type of each acknowledgement sent and not yet answered. A RENEW's answer is not counted
   * here: the renewal counts what it kept and lost itself ([[renewalEnded]]).
   */
  private val unanswered = new ConcurrentHashMap[RecordCoordinates, AcknowledgeType]()

  /**
   * Marks `record` with `ackType` in `client`, to be sent with its next commit or poll, and awaits
   * the answer; false when the client no longer holds the record ([[ShareConsumerClient.acknowledge]]).
   */
  def acknowledge(
      client: ShareConsumerClient,
      record: ConsumerRecord[Array[Byte], Array[Byte]],
      ackType: AcknowledgeType
  ): Boolean =
    client.acknowledge(record, ackType) && { unanswered.put(RecordCoordinates.of(record), ackType); true }

  override def onComplete(
      offsets: java.util.Map[TopicIdPartition, java.util.Set[java.lang.Long]],
      e: Exception
  ): Unit = offsets.asScala.foreach { case (tp, set) =>
    set.forEach { offset =>
      val ackType = Option(unanswered.remove(RecordCoordinates(tp.topic(), tp.partition(), offset)))
      if (!ackType.contains(AcknowledgeType.RENEW)) e match {
        case null => ackType.foreach(applied(_).incrementAndGet())
        // The broker refuses an acknowledgement with INVALID_RECORD_STATE when this member no longer
        // holds the record: its lock expired and the group may already have delivered it elsewhere.
        case _: InvalidRecordStateException => expired.incrementAndGet()
        // Any other failure leaves the records acquired until their lock expires; then they come back.
        case _ => failed.incrementAndGet()
      }
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
  def drain(): AcknowledgementEvents = AcknowledgementEvents(
    renewed.getAndSet(0),
    expired.getAndSet(0),
    failed.getAndSet(0),
    accepted = applied(AcknowledgeType.ACCEPT).getAndSet(0),
    released = applied(AcknowledgeType.RELEASE).getAndSet(0),
    rejected = applied(AcknowledgeType.REJECT).getAndSet(0)
  )
}

/**
 * What happened to a slot's acknowledgements and locks since a task last asked, for it to report as
 * metrics: records whose lock was renewed; records whose acknowledgement the broker refused because
 * the lock had expired; records whose acknowledgement was not applied for another reason; records
 * whose ACCEPT, RELEASE or REJECT the broker applied.
 */
private[sparkkafkashare] final case class AcknowledgementEvents(
    renewed: Long,
    expired: Long,
    failed: Long,
    accepted: Long = 0,
    released: Long = 0,
    rejected: Long = 0
) {
  def byMetric: Map[KafkaShareTaskMetric, Long] = Map(
    KafkaShareTaskMetric.LockRenewals -> renewed,
    KafkaShareTaskMetric.LocksExpired -> expired,
    KafkaShareTaskMetric.AcknowledgementsFailed -> failed,
    KafkaShareTaskMetric.Accepted -> accepted,
    KafkaShareTaskMetric.Released -> released,
    KafkaShareTaskMetric.Rejected -> rejected
  )
}
