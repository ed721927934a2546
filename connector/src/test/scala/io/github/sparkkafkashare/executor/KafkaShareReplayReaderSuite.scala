package io.github.sparkkafkashare.executor

import java.net.ServerSocket
import java.util.UUID
import java.util.concurrent.TimeUnit.{NANOSECONDS, SECONDS}

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.LocalKafka
import io.github.sparkkafkashare.UsesLocalServices
import io.github.sparkkafkashare.acknowledgements.{LoggedRecord, RecordCoordinates}
import io.github.sparkkafkashare.errors.KafkaShareRuntimeException
import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, TaskCounts}
import io.github.sparkkafkashare.LocalKafka.bootstrap
import org.apache.kafka.clients.admin.RecordsToDelete
import org.apache.kafka.common.TopicPartition
import org.apache.spark.{SparkConf, SparkContext}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Reading back a logged batch to re-run it, against the local broker (`make kafka-up`, or
 * KAFKA_BOOTSTRAP_SERVERS): records that retention removed and a cluster that does not answer are
 * different failures with different fixes (a new checkpoint; reaching the cluster), so the reader
 * must tell them apart. The end-to-end replays are in integration-tests/test_driver_kill.py.
 */
@UsesLocalServices
class KafkaShareReplayReaderSuite extends AnyFunSuite with BeforeAndAfterAll {

  private lazy val admin = LocalKafka.newAdmin()
  private lazy val spark =
    new SparkContext(new SparkConf().setMaster("local[1]").setAppName("KafkaShareReplayReaderSuite")
      .set("spark.ui.enabled", "false"))
  private lazy val metrics = KafkaShareSourceMetrics.register(spark, "replay-suite")

  override def afterAll(): Unit =
    try admin.close()
    finally spark.stop()

  /** A one-partition topic of records "r-0" to "r-(n-1)". */
  private def topicOf(n: Int, topic: String = s"replay-${UUID.randomUUID().toString.take(8)}"): String =
    LocalKafka.oneRecordPartition(admin, topic, n)

  private def secondsSince(startedNanos: Long): Long = SECONDS.convert(System.nanoTime() - startedNanos, NANOSECONDS)

  private def deleteTopic(topic: String): Unit = LocalKafka.deleteTopic(admin, topic)

  private def replay(
      servers: String,
      topic: String,
      offsets: Seq[Long],
      topicId: Option[String] = None
  ): Seq[String] = {
    val config = Map(
      "bootstrap.servers" -> servers,
      "group.id" -> "replay-suite",
      "client.id" -> "replay-suite",
      "default.api.timeout.ms" -> "3000"
    )
    val records = offsets.map(o => LoggedRecord(RecordCoordinates(topic, 0, o), deliveryCount = 1, topicId))
    val reader = new KafkaShareReplayReader(7L, 2, records, config, includeHeaders = false, new TaskCounts(metrics))
    Iterator.continually(reader).takeWhile(_.next()).map(r => new String(r.get().getBinary(1), "UTF-8")).toSeq
  }

  private def replayFailure(
      servers: String,
      topic: String,
      offsets: Seq[Long],
      topicId: Option[String] = None
  ): KafkaShareRuntimeException =
    intercept[KafkaShareRuntimeException](replay(servers, topic, offsets, topicId))

  test("reads back the logged records, in their logged order, and names the ones retention removed") {
    val topic = topicOf(10)
    assert(replay(bootstrap, topic, Seq(7L, 3L)) == Seq("r-7", "r-3"))

    admin.deleteRecords(Map(new TopicPartition(topic, 0) -> RecordsToDelete.beforeOffset(5L)).asJava)
      .all().get(30, SECONDS)
    val gone = replayFailure(bootstrap, topic, Seq(3L, 7L))
    assert(gone.getCondition == "KAFKA_SHARE_REPLAY_RECORDS_GONE", gone.getMessage)
    assert(gone.getMessage.contains(s"for example $topic-0@3:"), gone.getMessage)
  }

  test("a log that ends before a wanted offset (the topic made again, or an unclean leader election) names the " +
    "records past its end as gone, without waiting for the timeout") {
    val topic = topicOf(10)
    deleteTopic(topic)
    topicOf(5, topic)
    val started = System.nanoTime()
    val gone = replayFailure(bootstrap, topic, Seq(3L, 7L, 8L))
    assert(gone.getCondition == "KAFKA_SHARE_REPLAY_RECORDS_GONE", gone.getMessage)
    assert(gone.getMessage.contains(s"for example $topic-0@7, $topic-0@8:"), gone.getMessage)
    assert(secondsSince(started) < 3, "waited for the timeout where the log's end said the records were gone")
  }

  test(
    "a topic made again under its name names the logged records as gone, though the new one has records at their offsets"
  ) {
    val topic = topicOf(5)
    val logged = Some(LocalKafka.topicId(admin, topic))
    assert(replay(bootstrap, topic, Seq(1L, 3L), logged) == Seq("r-1", "r-3"))
    deleteTopic(topic)
    topicOf(5, topic)
    val gone = replayFailure(bootstrap, topic, Seq(1L, 3L), logged)
    assert(
      gone.getCondition == "KAFKA_SHARE_REPLAY_RECORDS_GONE" && gone.getMessage.contains(s"$topic-0@1, $topic-0@3"),
      gone.getMessage
    )
  }

  test("a deleted topic names its records as gone, without waiting for the timeout") {
    val topic = topicOf(10)
    deleteTopic(topic)
    val started = System.nanoTime()
    val gone = replayFailure(bootstrap, topic, Seq(3L, 7L))
    assert(gone.getCondition == "KAFKA_SHARE_REPLAY_RECORDS_GONE", gone.getMessage)
    assert(gone.getMessage.contains(s"for example $topic-0@3, $topic-0@7:"), gone.getMessage)
    assert(secondsSince(started) < 3, "waited for the timeout where the cluster said the topic was gone")
  }

  test("a cluster that does not answer fails the read-back as unreachable, after kafka.default.api.timeout.ms") {
    // A port nothing listens on: the consumer's fetches get no answer, as from brokers that are down.
    val closedPort = {
      val s = new ServerSocket(0);
      try s.getLocalPort
      finally s.close()
    }
    val servers = s"localhost:$closedPort"
    val started = System.nanoTime()
    val failure = replayFailure(servers, "any-topic", Seq(3L))
    assert(failure.getCondition == "KAFKA_SHARE_BROKER_UNREACHABLE", failure.getMessage)
    assert(
      failure.getMessage.contains(s"Could not reach the Kafka cluster at $servers within 3000 ms while " +
        "reading back 1 records of slot 2 to re-run the batch of round 7"),
      failure.getMessage
    )
    assert(secondsSince(started) < 30, "waited far past the timeout")
  }
}
