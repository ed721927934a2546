package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.UUID
import java.util.concurrent.TimeUnit.SECONDS

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.LocalKafka
import io.github.sparkkafkashare.LocalKafka.bootstrap
import io.github.sparkkafkashare.UsesLocalServices
import io.github.sparkkafkashare.acknowledgements.RecordCoordinates
import org.apache.kafka.clients.admin.NewTopic
import org.apache.kafka.clients.consumer.AcknowledgeType
import org.apache.kafka.common.TopicPartition
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/** Kafka's share consumer behind the slot's narrow interface, against the local broker. */
@UsesLocalServices
class ShareConsumerClientSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val admin = LocalKafka.newAdmin()

  override def afterAll(): Unit = admin.close()

  test("a record the client no longer holds (renewed, and not yet polled again) is not acknowledged, and says so") {
    val topic = LocalKafka.oneRecordPartition(admin, s"client-${UUID.randomUUID().toString.take(8)}", 5)
    LocalKafka.setGroupConfigs(admin, topic, "share.auto.offset.reset" -> "earliest")
    val outcomes = new AcknowledgementOutcomes
    val client = new KafkaShareConsumerClient(
      Map[String, Object](
        "bootstrap.servers" -> bootstrap,
        "group.id" -> topic,
        "share.acknowledgement.mode" -> "explicit"
      ).asJava,
      outcomes
    )
    try {
      client.subscribe(Set(topic))
      val deadline = System.nanoTime() + 30000000000L
      var polled = client.poll(Duration.ZERO)
      while (polled.records.isEmpty && System.nanoTime() < deadline) polled = client.poll(Duration.ofMillis(500))
      val records = polled.records.asScala
      assert(records.size == 5 && polled.topicIds == Map(new TopicPartition(topic, 0) -> LocalKafka.topicId(
        admin,
        topic
      )))
      assert(records.forall(r => outcomes.acknowledge(client, r, AcknowledgeType.RENEW)))
      assert(client.commit(Duration.ofSeconds(30)).contains(Map.empty))
      // Kafka's client gives renewed records back to the next poll only; until then it does not hold them.
      assert(records.forall(r => !client.acknowledge(r, AcknowledgeType.ACCEPT)))
      val back = client.poll(Duration.ZERO).records.asScala
      assert(back.map(RecordCoordinates.of) == records.map(RecordCoordinates.of))
      assert(back.forall(r => outcomes.acknowledge(client, r, AcknowledgeType.ACCEPT)))
      assert(client.commit(Duration.ofSeconds(30)).contains(Map.empty))
      assert(
        outcomes.drain() == AcknowledgementEvents(renewed = 0, expired = 0, failed = 0, accepted = 5),
        "every renewal and ACCEPT applied; the ACCEPTs counted as the broker answered"
      )
    } finally client.close(Duration.ofSeconds(30))
  }

  /*
   * A renewal is RENEW, commit, poll, and the slot counts on that poll returning the renewed records
   * and nothing else: were it to return records the client fetched meanwhile, the renewal would have
   * to give them back, a delivery each time, and past the group's delivery limit Kafka archives a
   * record unread. Kafka's client (4.3) reads its fetch buffer only while it holds no records and
   * renews none; here it holds records of four partitions for eight renewals while more records are
   * produced and fetched, with Kafka's default acquisition and small fetches, and with record_limit.
   */
  for (
    (mode, settings) <- Seq(
      "batch_optimized, 1 KiB fetches" -> Map("fetch.max.bytes" -> "1024"),
      "record_limit, 10 records a poll" -> Map("share.acquire.mode" -> "record_limit", "max.poll.records" -> "10")
    )
  ) {
    test(s"a renewal's poll returns the renewed records and nothing the client fetched meanwhile ($mode)") {
      val topic = s"renewal-${UUID.randomUUID().toString.take(8)}"
      admin.createTopics(java.util.List.of(new NewTopic(topic, 4, 1.toShort))).all().get(30, SECONDS)
      LocalKafka.setGroupConfigs(
        admin,
        topic,
        "share.auto.offset.reset" -> "earliest",
        "share.record.lock.duration.ms" -> "3000",
        "share.renew.acknowledge.enable" -> "true"
      )
      def produce(prefix: String): Unit =
        (0 until 4).foreach(p => LocalKafka.produce(topic, (0 until 100).map(i => s"$prefix-$i"), partition = p))
      produce("before")
      val client = new KafkaShareConsumerClient(
        (Map[String, Object](
          "bootstrap.servers" -> bootstrap,
          "group.id" -> topic,
          "share.acknowledgement.mode" -> "explicit"
        ) ++ settings).asJava,
        new AcknowledgementOutcomes
      )
      try {
        client.subscribe(Set(topic))
        var held = Seq.empty[org.apache.kafka.clients.consumer.ConsumerRecord[Array[Byte], Array[Byte]]]
        def pollUntilRecords(timeout: Duration): Seq[RecordCoordinates] = {
          val deadline = System.nanoTime() + timeout.toNanos
          var polled = client.poll(Duration.ZERO).records.asScala
          while (polled.isEmpty && System.nanoTime() < deadline)
            polled = client.poll(Duration.ofMillis(100)).records.asScala
          held = polled.toSeq
          held.map(RecordCoordinates.of)
        }
        val acquired = pollUntilRecords(Duration.ofSeconds(30)).toSet
        assert(acquired.nonEmpty, "nothing acquired")
        produce("during")
        (1 to 8).foreach { renewal =>
          Thread.sleep(1000)
          assert(held.forall(r => client.acknowledge(r, AcknowledgeType.RENEW)))
          assert(client.commit(Duration.ofSeconds(10)).contains(Map.empty), s"renewal $renewal not applied")
          assert(pollUntilRecords(Duration.ofSeconds(10)).toSet == acquired, s"renewal $renewal returned other records")
        }
        held.foreach(r => client.acknowledge(r, AcknowledgeType.ACCEPT))
        assert(client.commit(Duration.ofSeconds(10)).contains(Map.empty))
      } finally client.close(Duration.ofSeconds(30))
    }
  }
}
