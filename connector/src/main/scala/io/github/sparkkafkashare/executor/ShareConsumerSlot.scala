package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.locks.ReentrantLock

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.HeldRecords
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord, KafkaShareConsumer}
import org.apache.kafka.common.serialization.ByteArrayDeserializer
import org.apache.spark.internal.Logging

/** Identifies the share consumer of one slot of one query run. */
private[sparkkafkashare] final case class SlotKey(runId: String, slot: Int)

/** How a settlement acknowledged the records it found held. */
private[sparkkafkashare] final case class Settlement(accepted: Int, released: Int)

/**
 * One long-lived share consumer in explicit acknowledgement mode, used by one task at a time.
 *
 * Explicit mode is what lets the source wait for Spark's commit: a record is acknowledged only when
 * [[settle]] learns the fate of the batch that read it. Kafka requires every record of a poll to be
 * acknowledged before the next poll, so a slot polls once per round and settles first.
 */
private[sparkkafkashare] final class ShareConsumerSlot(val key: SlotKey, config: java.util.Map[String, Object])
  extends Logging {

  private val consumer =
    new KafkaShareConsumer[Array[Byte], Array[Byte]](config, new ByteArrayDeserializer, new ByteArrayDeserializer)
  private[executor] val lock = new ReentrantLock()
  @volatile private[executor] var lastUsedNanos: Long = System.nanoTime()

  private var subscribed: Set[String] = Set.empty
  private var held: Option[HeldRecords] = None
  /** The highest round this slot has been told is committed; decides settlement at close. */
  private var committedThrough: Long = -1L

  /**
   * ACCEPTs or RELEASEs what the slot holds, given that rounds up to `committedThrough` are
   * committed. Acknowledgements ride on the next poll; [[flush]] sends them at once.
   */
  def settle(committedThrough: Long): Settlement = {
    this.committedThrough = math.max(this.committedThrough, committedThrough)
    held match {
      case None => Settlement(0, 0)
      case Some(records) =>
        val ackType = records.settlement(this.committedThrough)
        records.records.forEach(r => consumer.acknowledge(r, ackType))
        held = None
        if (ackType == AcknowledgeType.ACCEPT) Settlement(records.size, 0) else Settlement(0, records.size)
    }
  }

  /** Releases what the given round acquired: its task failed, so no batch will ever commit it. */
  def releaseRound(round: Long, timeout: Duration): Unit = held.filter(_.round == round).foreach { records =>
    records.records.forEach(r => consumer.acknowledge(r, AcknowledgeType.RELEASE))
    held = None
    flush(timeout)
  }

  /**
   * Polls until records arrive or the timeout passes, and holds what arrived for `round`.
   * Empty polls acquire nothing, so they may repeat; a non-empty one ends the round's polling.
   */
  def pollRound(round: Long, topics: Set[String], timeout: Duration)
      : java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = {
    require(held.isEmpty, s"slot ${key.slot} polled while records of round ${held.get.round} are unsettled")
    if (topics != subscribed) {
      if (topics.isEmpty) consumer.unsubscribe() else consumer.subscribe(topics.asJava)
      subscribed = topics
    }
    if (subscribed.isEmpty) return java.util.Collections.emptyList()
    val deadline = System.nanoTime() + timeout.toNanos
    var records = consumer.poll(timeout)
    while (records.isEmpty && System.nanoTime() < deadline) {
      records = consumer.poll(Duration.ofNanos(deadline - System.nanoTime()))
    }
    val list = new java.util.ArrayList[ConsumerRecord[Array[Byte], Array[Byte]]](records.count())
    records.forEach(r => list.add(r))
    if (!list.isEmpty) held = Some(new HeldRecords(round, list))
    list
  }

  /** Sends pending acknowledgements now instead of with the next poll. */
  def flush(timeout: Duration): Unit = {
    val failures = consumer.commitSync(timeout).asScala.collect { case (tp, e) if e.isPresent => tp -> e.get }
    failures.foreach { case (tp, e) =>
      logWarning(s"Acknowledgements for $tp were not applied (${e.getMessage}); the broker will redeliver those records.")
    }
  }

  /** Settles what is held by what the slot knows is committed, then leaves the group. */
  def close(committedThrough: Long, timeout: Duration): Unit = {
    try settle(committedThrough)
    finally consumer.close(timeout)
  }
}
