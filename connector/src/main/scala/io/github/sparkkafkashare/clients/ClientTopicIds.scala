package io.github.sparkkafkashare.clients

import java.lang.reflect.Field

import scala.jdk.CollectionConverters._

import org.apache.kafka.clients.Metadata
import org.apache.kafka.clients.consumer.{KafkaConsumer, KafkaShareConsumer}
import org.apache.kafka.common.{TopicIdPartition, TopicPartition}

/**
 * The topic ids under which Kafka's consumers read records, which their public API does not give:
 * a `ConsumerRecord` names its topic, and a topic deleted and made again under the same name reuses
 * its offsets. Read from the client's own state, by field name: the client is the kafka-clients
 * release this jar shades (build.sbt), so its fields are known, and `ClientTopicIdsSuite` fails the
 * build if a new release renames them.
 */
private[sparkkafkashare] object ClientTopicIds {
  private def field(cls: Class[_], name: String): Field = {
    val f = cls.getDeclaredField(name)
    f.setAccessible(true)
    f
  }

  private lazy val shareDelegate = field(classOf[KafkaShareConsumer[_, _]], "delegate")
  private lazy val consumerDelegate = field(classOf[KafkaConsumer[_, _]], "delegate")
  private lazy val currentFetch = field(Class.forName(internal("ShareConsumerImpl")), "currentFetch")
  private lazy val batches = field(Class.forName(internal("ShareFetch")), "batches")

  private def internal(name: String) = s"${classOf[KafkaConsumer[_, _]].getPackageName}.internals.$name"

  /**
   * The topic id of each partition whose records the share consumer's last non-empty poll returned:
   * the ids under which the broker delivered them, whatever the client's metadata has learned since.
   */
  def ofLastPoll(consumer: KafkaShareConsumer[_, _]): Map[TopicPartition, String] = {
    val fetch = currentFetch.get(shareDelegate.get(consumer))
    batches.get(fetch).asInstanceOf[java.util.Map[TopicIdPartition, _]].keySet().asScala
      .map(p => p.topicPartition() -> p.topicId().toString).toMap
  }

  /** The topic ids the consumer's metadata holds now, by topic name: those its next fetches use. */
  def known(consumer: KafkaConsumer[_, _]): Map[String, String] = {
    val delegate = consumerDelegate.get(consumer)
    val metadata = field(delegate.getClass, "metadata").get(delegate).asInstanceOf[Metadata]
    metadata.topicIds().asScala.map { case (topic, id) => topic -> id.toString }.toMap
  }
}
