package io.github.sparkkafkashare.clients

import java.time.Duration
import java.util.UUID

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.LocalKafka
import io.github.sparkkafkashare.LocalKafka.bootstrap
import io.github.sparkkafkashare.UsesLocalServices
import org.apache.kafka.clients.consumer.{AcknowledgeType, KafkaConsumer, KafkaShareConsumer}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.serialization.ByteArrayDeserializer
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * The topic ids Kafka's consumers read records under, which ClientTopicIds reads from the client's
 * own fields: against the local broker, with the kafka-clients release this jar shades, so a release
 * that renames those fields fails here.
 */
@UsesLocalServices
class ClientTopicIdsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val admin = LocalKafka.newAdmin()

  override def afterAll(): Unit = admin.close()

  /** Polls until records come; acknowledges them, so the next poll may run. */
  private def pollRecords(consumer: KafkaShareConsumer[Array[Byte], Array[Byte]]): Unit = {
    val deadline = System.nanoTime() + 30000000000L
    var polled = 0
    while (polled == 0 && System.nanoTime() < deadline) {
      val records = consumer.poll(Duration.ofMillis(500))
      records.forEach(r => consumer.acknowledge(r, AcknowledgeType.ACCEPT))
      polled = records.count()
    }
    assert(polled > 0, "no records came")
  }

  test(
    "a share consumer's last poll names the id of the topic it read, a topic made again under its name the new one"
  ) {
    val topic = LocalKafka.oneRecordPartition(admin, s"ids-${UUID.randomUUID().toString.take(8)}", 3)
    val group = topic
    LocalKafka.setGroupConfigs(admin, group, "share.auto.offset.reset" -> "earliest")
    val consumer = LocalKafka.newShareConsumer(group)
    try {
      consumer.subscribe(Seq(topic).asJava)
      pollRecords(consumer)
      val first = LocalKafka.topicId(admin, topic)
      assert(ClientTopicIds.ofLastPoll(consumer) == Map(new TopicPartition(topic, 0) -> first))
      consumer.commitSync()
      LocalKafka.deleteTopic(admin, topic)
      LocalKafka.oneRecordPartition(admin, topic, 3)
      pollRecords(consumer)
      val second = LocalKafka.topicId(admin, topic)
      assert(second != first)
      assert(ClientTopicIds.ofLastPoll(consumer) == Map(new TopicPartition(topic, 0) -> second))
    } finally consumer.close()
  }

  test("a consumer's metadata names the ids of the topics it reads") {
    val topic = LocalKafka.oneRecordPartition(admin, s"ids-${UUID.randomUUID().toString.take(8)}", 3)
    val consumer = new KafkaConsumer(
      Map[String, Object]("bootstrap.servers" -> bootstrap).asJava,
      new ByteArrayDeserializer,
      new ByteArrayDeserializer
    )
    try {
      consumer.assign(Seq(new TopicPartition(topic, 0)).asJava)
      consumer.seekToBeginning(Seq(new TopicPartition(topic, 0)).asJava)
      val deadline = System.nanoTime() + 30000000000L
      while (consumer.poll(Duration.ofMillis(500)).isEmpty && System.nanoTime() < deadline) {}
      assert(ClientTopicIds.known(consumer).get(topic).contains(LocalKafka.topicId(admin, topic)))
    } finally consumer.close()
  }
}
