package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.UUID
import java.util.concurrent.TimeUnit.SECONDS

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.github.sparkkafkashare.LocalKafka
import io.github.sparkkafkashare.LocalKafka.bootstrap
import io.github.sparkkafkashare.UsesLocalServices
import io.github.sparkkafkashare.acknowledgements.AcknowledgementMarks
import org.apache.kafka.clients.admin.NewTopic
import org.apache.kafka.clients.consumer.AcknowledgeType
import org.apache.spark.{SparkConf, SparkContext}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * A slot whose broker stops answering (SIGSTOP, as in a long GC pause or a network partition) while
 * it renews the locks of the records it holds, for longer than the renewal waits and than the locks
 * last, then answers again. Kafka's client takes records acknowledged with RENEW out of those it
 * holds for acknowledgement until a poll returns them; when the renewal's answer does not come in
 * time, or says the locks had expired, the client no longer holds them, and acknowledging one throws.
 * The slot must settle anyway, count them as locks lost, and leave them to the group, which delivers
 * them again. Against the local broker, which the suite pauses for 14 s.
 */
@UsesLocalServices
class BrokerPauseSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val admin = LocalKafka.newAdmin()
  // The driver's registry of runs, which the slot's pool may ask; nothing else of Spark runs here.
  private lazy val spark = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("BrokerPauseSuite")
    .set("spark.ui.enabled", "false"))

  override def afterAll(): Unit =
    try admin.close()
    finally spark.stop()

  private val lock = 4.seconds

  test(
    "a slot whose renewal the paused broker does not answer settles, counting the records it no longer holds as locks lost"
  ) {
    spark
    val topic = s"paused-${UUID.randomUUID().toString.take(8)}"
    admin.createTopics(java.util.List.of(new NewTopic(topic, 1, 1.toShort))).all().get(30, SECONDS)
    val group = topic
    LocalKafka.setGroupConfigs(
      admin,
      group,
      "share.auto.offset.reset" -> "earliest",
      "share.record.lock.duration.ms" -> lock.toMillis.toString
    )
    LocalKafka.produce(topic, (0 until 50).map(i => s"r-$i"), oneBatch = true)
    val config = Map[String, Object](
      "bootstrap.servers" -> bootstrap,
      "group.id" -> group,
      "client.id" -> s"$topic-1",
      "share.acknowledgement.mode" -> "explicit"
    ).asJava
    val limits = GroupLimits(
      renewAllowed = true,
      recordLocksPerPartition = 2000,
      lockDurationMs = lock.toMillis,
      assignmentIntervalMs = 60000L
    )
    val slot = new ShareConsumerSlot(SlotKey(UUID.randomUUID().toString, 1), config, limits)
    try {
      val held = slot.pollRound(1, Set(topic), Duration.ofSeconds(30)).size
      assert(held == 50)
      // Paused past the renewal's wait (10 s) and past the locks; the renewal starts half a lock in.
      val paused = Future(LocalKafka.pauseBroker(Duration.ofSeconds(14)))
      Thread.sleep(lock.toMillis / 2 + 500)
      // As the pool's renewer calls it: a failure is logged, and the renewer comes back.
      try slot.renewLocksIfDue()
      catch { case NonFatal(e) => info(s"the renewal failed: $e") }
      Await.result(paused, 60.seconds)
      val settled = slot.settle(committedThrough = 1, AcknowledgementMarks.None)
      slot.flush(Duration.ofSeconds(30)) // the renewal's outcome reaches the callback with a call of the consumer
      val events = slot.drainAcknowledgementEvents()
      assert(settled.accepted + events.expired == held, s"settled $settled, then $events")
      assert(
        events.expired > 0 && events.failed == 0,
        s"the records the consumer no longer holds count as locks lost: $events"
      )
    } finally slot.close(-1L, AcknowledgementMarks.None, Duration.ofSeconds(30))
    // The group delivers every record the slot could not acknowledge again; none is lost.
    val other = LocalKafka.newShareConsumer(group)
    try {
      other.subscribe(java.util.List.of(topic))
      val deadline = System.nanoTime() + SECONDS.toNanos(60)
      while (LocalKafka.lag(admin, group, topic).forall(_ > 0) && System.nanoTime() < deadline) {
        other.poll(Duration.ofMillis(500)).forEach(r => other.acknowledge(r, AcknowledgeType.ACCEPT))
        other.commitSync()
      }
      assert(LocalKafka.lag(admin, group, topic).contains(0L))
    } finally other.close()
  }
}
