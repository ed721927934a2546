package io.github.sparkkafkashare.executor

import java.time.Duration

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.clients.ClientTopicIds
import org.apache.kafka.clients.consumer.{AcknowledgeType, AcknowledgementCommitCallback, ConsumerRecord, KafkaShareConsumer}
import org.apache.kafka.common.{KafkaException, TopicPartition}
import org.apache.kafka.common.errors.TimeoutException
import org.apache.kafka.common.serialization.ByteArrayDeserializer

/** What one poll returned: the records, and the id of the topic each partition's records were delivered under. */
private[executor] final case class Polled(
    records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]],
    topicIds: Map[TopicPartition, String]
)

/**
 * The calls a slot makes of its share consumer. [[KafkaShareConsumerClient]] is Kafka's client
 * behind it. Like Kafka's client, it is for one thread at a time (the slot's consumer lock).
 */
private[executor] trait ShareConsumerClient {
  def subscribe(topics: Set[String]): Unit

  def unsubscribe(): Unit

  /** Polls; throws what Kafka's client throws (a refusal of the group's ACLs, a full group). */
  def poll(timeout: Duration): Polled

  /**
   * Marks `record` to be acknowledged with `ackType` at the next commit or poll. Returns false when
   * the client no longer holds the record: Kafka's client lets go of a record acknowledged with RENEW
   * until a poll returns it again, and for good when the renewal fails or gets no answer in time.
   */
  def acknowledge(record: ConsumerRecord[Array[Byte], Array[Byte]], ackType: AcknowledgeType): Boolean

  /**
   * Sends the marked acknowledgements and waits up to `timeout` for the broker's answer. Returns the
   * partitions whose acknowledgements the broker did not apply, with why, or None when no answer came
   * in time: then their outcome comes later, to the acknowledgement callback.
   */
  def commit(timeout: Duration): Option[Map[TopicPartition, KafkaException]]

  /** The lock duration the broker told, once it has. */
  def acquisitionLockTimeoutMs: Option[Long]

  def close(timeout: Duration): Unit
}

/** Kafka's share consumer, in explicit acknowledgement mode, with `outcomes` as its acknowledgement callback. */
private[executor] final class KafkaShareConsumerClient(
    config: java.util.Map[String, Object],
    outcomes: AcknowledgementCommitCallback
) extends ShareConsumerClient {

  private val consumer =
    new KafkaShareConsumer[Array[Byte], Array[Byte]](config, new ByteArrayDeserializer, new ByteArrayDeserializer)
  consumer.setAcknowledgementCommitCallback(outcomes)

  override def subscribe(topics: Set[String]): Unit = consumer.subscribe(topics.asJava)

  override def unsubscribe(): Unit = consumer.unsubscribe()

  override def poll(timeout: Duration): Polled = {
    val records = new java.util.ArrayList[ConsumerRecord[Array[Byte], Array[Byte]]]()
    consumer.poll(timeout).forEach(r => records.add(r))
    Polled(records, if (records.isEmpty) Map.empty else ClientTopicIds.ofLastPoll(consumer))
  }

  override def acknowledge(record: ConsumerRecord[Array[Byte], Array[Byte]], ackType: AcknowledgeType): Boolean =
    try { consumer.acknowledge(record, ackType); true }
    catch {
      // "The record cannot be acknowledged": not among the records the client holds for acknowledgement.
      case _: IllegalStateException => false
    }

  override def commit(timeout: Duration): Option[Map[TopicPartition, KafkaException]] =
    try Some(consumer.commitSync(timeout).asScala.collect {
        case (tp, e) if e.isPresent => tp.topicPartition() -> e.get
      }.toMap)
    catch { case _: TimeoutException => None }

  override def acquisitionLockTimeoutMs: Option[Long] =
    Option(consumer.acquisitionLockTimeoutMs().orElse(null)).map(_.toLong)

  override def close(timeout: Duration): Unit = consumer.close(timeout)
}
