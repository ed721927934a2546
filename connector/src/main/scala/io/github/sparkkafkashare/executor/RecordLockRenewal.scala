package io.github.sparkkafkashare.executor

import java.time.Duration

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{HeldRecords, RecordCoordinates}
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord, KafkaShareConsumer}
import org.apache.spark.internal.Logging

/** How a share consumer keeps the records it holds locked past their lock duration: RENEW, send, poll. */
private[executor] object RecordLockRenewal extends Logging {
  private val RenewTimeout = Duration.ofSeconds(10)
  private val RenewPollInterval = Duration.ofMillis(20)

  /**
   * Renews the locks of `records`, which `consumer` holds, under its slot's consumer lock. Kafka
   * returns renewed records from the next poll and accepts acknowledgements only for records
   * of the latest poll, so a renewal is RENEW, send, poll; the records that come back replace the
   * held ones (a running batch already has their rows). Those that do not come back are kept as
   * [[HeldRecords.unlocked]]: a batch evaluated again must still read them.
   */
  def renew(
      consumer: KafkaShareConsumer[Array[Byte], Array[Byte]],
      slot: Int,
      records: HeldRecords,
      flush: Duration => Set[(String, Int)],
      outcomes: AcknowledgementOutcomes): HeldRecords = {
    val renewedAt = System.nanoTime()
    records.records.forEach(r => consumer.acknowledge(r, AcknowledgeType.RENEW))
    val refused = flush(RenewTimeout) // counted by the acknowledgement callback
    val expected = records.records.asScala.filterNot(r => refused.contains(r.topic() -> r.partition()))
      .map(RecordCoordinates.of).toSet
    val back = new java.util.ArrayList[ConsumerRecord[Array[Byte], Array[Byte]]](expected.size)
    val deadline = System.nanoTime() + RenewTimeout.toNanos
    // The client hands renewed records back from its own buffer, normally to the first poll. Only
    // one poll may return records: in explicit mode the next would fail until they are acknowledged,
    // which waits for their batch. Any not back by then count as not renewed.
    var wait = Duration.ZERO
    var returned = expected.isEmpty
    while (!returned && System.nanoTime() < deadline) {
      consumer.poll(wait).forEach { r =>
        returned = true
        if (expected.contains(RecordCoordinates.of(r))) back.add(r)
        // Fetched, not renewed: nothing can take it now, and the next poll needs it acknowledged.
        else consumer.acknowledge(r, AcknowledgeType.RELEASE)
      }
      wait = RenewPollInterval
    }
    outcomes.renewedLocks(back.size)
    if (back.size < records.size) {
      logWarning(s"Slot $slot: the locks of ${records.size - back.size} of ${records.size} records " +
        s"could not be renewed; the group will deliver those records again.")
    }
    val stillLocked = back.asScala.map(RecordCoordinates.of).toSet
    val notRenewed = records.records.asScala.filterNot(r => stillLocked.contains(RecordCoordinates.of(r)))
    records.copy(records = back, lockedSinceNanos = renewedAt, unlocked = records.unlocked ++ notRenewed)
  }
}
