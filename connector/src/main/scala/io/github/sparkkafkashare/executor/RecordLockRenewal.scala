package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.TimeUnit

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{HeldRecords, RecordCoordinates}
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord}
import org.apache.kafka.common.TopicPartition
import org.apache.spark.internal.Logging

/** How a share consumer keeps the records it holds locked past their lock duration: RENEW, send, poll. */
private[executor] object RecordLockRenewal extends Logging {
  private val RenewTimeout = Duration.ofSeconds(10)
  private val RenewPollInterval = Duration.ofMillis(20)

  /** Renews the locks of `records` ([[renew]]) once half their duration has passed, where the group allows renewal. */
  def renewIfDue(
      consumer: ShareConsumerClient,
      slot: Int,
      records: HeldRecords,
      limits: GroupLimits,
      outcomes: AcknowledgementOutcomes
  ): HeldRecords =
    if (
      limits.renewAllowed && records.size > 0 &&
      System.nanoTime() - records.lockedSinceNanos > lockNanos(consumer, limits) / 2
    ) renew(consumer, slot, records, outcomes)
    else records

  /** How long the consumer's records stay locked: as its broker said, else as the group's config says. */
  def lockNanos(consumer: ShareConsumerClient, limits: GroupLimits): Long =
    TimeUnit.MILLISECONDS.toNanos(consumer.acquisitionLockTimeoutMs.getOrElse(limits.lockDurationMs))

  /**
   * Renews the locks of `records`, which `consumer` holds, under its slot's consumer lock. Kafka
   * returns renewed records from the next poll and accepts acknowledgements only for records
   * of the latest poll, so a renewal is RENEW, send, poll; the records that come back replace the
   * held ones (a running batch already has their rows). Those that do not come back are kept as
   * [[HeldRecords.unlocked]]: a batch evaluated again must still read them. When the broker does not
   * answer the renewal in time, none is renewed as far as the slot knows: the client holds them no
   * more (it gives back renewed records only to a poll), so they count as locks lost at once, whatever
   * the answer says when it comes (a late success hands them to a later poll, as a redelivery).
   *
   * The renewal polls only once the broker applied some of it, and Kafka's client (4.3) then hands
   * that poll the renewed records and nothing it fetched meanwhile: it reads its fetch buffer only
   * while it holds no records and renews none (`ShareConsumerImpl.collect`). A record that came back
   * unasked for all the same would be RELEASEd (the next poll needs it acknowledged) and warned of.
   */
  def renew(
      consumer: ShareConsumerClient,
      slot: Int,
      records: HeldRecords,
      outcomes: AcknowledgementOutcomes
  ): HeldRecords = {
    val renewedAt = System.nanoTime()
    val sent = records.records.asScala.filter(r => outcomes.acknowledge(consumer, r, AcknowledgeType.RENEW))
    val refused = commit(consumer, slot, RenewTimeout)
    val expected = refused.fold(Set.empty[RecordCoordinates]) { partitions =>
      sent.filterNot(r => partitions.contains(new TopicPartition(r.topic(), r.partition()))).map(RecordCoordinates.of).toSet
    }
    val back = new java.util.ArrayList[ConsumerRecord[Array[Byte], Array[Byte]]](expected.size)
    val deadline = System.nanoTime() + RenewTimeout.toNanos
    // The client hands renewed records back from its own buffer, normally to the first poll. Only
    // one poll may return records: in explicit mode the next would fail until they are acknowledged,
    // which waits for their batch. Any not back by then count as not renewed.
    var wait = Duration.ZERO
    var returned = expected.isEmpty
    while (!returned && System.nanoTime() < deadline) {
      consumer.poll(wait).records.forEach { r =>
        returned = true
        if (expected.contains(RecordCoordinates.of(r))) back.add(r)
        else {
          logWarning(
            s"Slot $slot: a renewal's poll returned ${RecordCoordinates.of(r)}, which it did not renew; released."
          )
          outcomes.acknowledge(consumer, r, AcknowledgeType.RELEASE)
        }
      }
      wait = RenewPollInterval
    }
    outcomes.renewalEnded(renewed = back.size, lost = records.size - back.size)
    if (back.size < records.size) {
      logWarning(s"Slot $slot: the locks of ${records.size - back.size} of ${records.size} records " +
        s"could not be renewed; the group will deliver those records again.")
    }
    val stillLocked = back.asScala.map(RecordCoordinates.of).toSet
    val notRenewed = records.records.asScala.filterNot(r => stillLocked.contains(RecordCoordinates.of(r)))
    records.copy(records = back, lockedSinceNanos = renewedAt, unlocked = records.unlocked ++ notRenewed)
  }

  /**
   * Sends the consumer's marked acknowledgements and waits up to `timeout` for the broker's answer;
   * logs what the broker did not apply (it delivers those records again). Returns those partitions,
   * or None when no answer came in time (the acknowledgement callback gets it later).
   */
  def commit(consumer: ShareConsumerClient, slot: Int, timeout: Duration): Option[Set[TopicPartition]] = {
    val answer = consumer.commit(timeout)
    answer match {
      case Some(refused) => refused.foreach { case (tp, e) =>
          logWarning(
            s"Slot $slot: acknowledgements for $tp were not applied (${e.getMessage}); the broker will redeliver those records."
          )
        }
      case None => logWarning(s"Slot $slot: the brokers did not answer acknowledgements within $timeout; the records " +
          "whose acknowledgement they never apply come back to the group when their locks expire.")
    }
    answer.map(_.keySet)
  }
}
