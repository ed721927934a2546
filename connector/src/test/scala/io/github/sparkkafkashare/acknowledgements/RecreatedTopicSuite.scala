package io.github.sparkkafkashare.acknowledgements

import java.nio.file.Files
import java.util.UUID

import scala.concurrent.duration._

import io.github.sparkkafkashare.LocalKafka
import io.github.sparkkafkashare.LocalKafka.bootstrap
import io.github.sparkkafkashare.UsesLocalServices
import org.apache.kafka.clients.admin.NewTopic
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.Trigger
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite

/**
 * A topic deleted and made again under its name while a logging strategy reads it: the new topic's
 * records reuse the old one's offsets, and here their timestamps too, as a replay or a mirror sets
 * them. They are other records, and each must reach the sink once. The records log tells them apart
 * by the id of the topic the broker delivered them under. A real broker and a real query in local mode.
 */
@UsesLocalServices
class RecreatedTopicSuite extends AnyFunSuite with BeforeAndAfterAll {

  private lazy val admin = LocalKafka.newAdmin()
  private lazy val spark = SparkSession.builder().master("local[2]").appName("RecreatedTopicSuite")
    .config("spark.ui.enabled", "false")
    .getOrCreate()

  override def afterAll(): Unit =
    try admin.close()
    finally spark.stop()

  private val recordCount = 20
  private def values(prefix: String) = (0 until recordCount).map(i => s"$prefix-$i")
  private def createTopic(topic: String): Unit =
    admin.createTopics(java.util.List.of(new NewTopic(topic, 1, 1.toShort))).all().get()

  for (strategy <- Seq("checkpoint-dedup", "two-phase-commit")) {
    test(s"$strategy: a topic made again under its name, with the old timestamps, has all its records read once") {
      val topic = s"recreated-${UUID.randomUUID().toString.take(8)}"
      createTopic(topic)
      val sink = s"recreated_${UUID.randomUUID().toString.take(8)}"
      val query = spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.share.group.id", topic)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.share.assignment.interval.ms", "0")
        .option("kafka.share.exactly.once.strategy", strategy)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory").queryName(sink)
        .option("checkpointLocation", Files.createTempDirectory("recreated").toString)
        .trigger(Trigger.ProcessingTime(200))
        .start()
      def got = spark.table(sink).collect().map(_.getString(0)).toSeq
      try {
        // Recent: records older than the topic's retention (7 days) go at the broker's next retention check.
        val start = System.currentTimeMillis()
        val timestamp = (i: Int) => Some(start + i)
        LocalKafka.produce(topic, values("old"), timestamp = timestamp)
        eventually(timeout(60.seconds), interval(200.millis))(assert(got.size >= recordCount))
        // Made again at once, within the seconds the driver takes to describe the topic again.
        admin.deleteTopics(java.util.List.of(topic)).all().get()
        eventually(timeout(30.seconds), interval(50.millis))(createTopic(topic))
        LocalKafka.produce(topic, values("new"), timestamp = timestamp)
        eventually(timeout(60.seconds), interval(500.millis)) {
          assert(got.size >= 2 * recordCount, s"${got.size} records read")
          assert(LocalKafka.lag(admin, topic, topic).contains(0L))
        }
      } finally query.stop()
      assert(query.exception.isEmpty, query.exception)
      val lost = (values("old") ++ values("new")).toSet -- got
      val duplicated = got.groupBy(identity).collect { case (v, n) if n.size > 1 => v }
      assert(lost.isEmpty && duplicated.isEmpty, s"lost ${lost.toSeq.sorted}, duplicated ${duplicated.toSeq.sorted}")
    }
  }
}
