package io.github.sparkkafkashare.acknowledgements

import java.nio.file.Files
import java.util.UUID
import java.util.concurrent.atomic.AtomicBoolean

import scala.concurrent.duration._

import io.github.sparkkafkashare.{InterceptedLocalFileSystem, LocalKafka}
import io.github.sparkkafkashare.LocalKafka.bootstrap
import io.github.sparkkafkashare.UsesLocalServices
import org.apache.hadoop.fs.Path
import org.apache.kafka.clients.admin.NewTopic
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.Trigger
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite

/**
 * Two slots of one round and the same records: a slot whose records log is slow to appear (the
 * checkpoint's storage is slow, or the driver slow to answer the fence) can lose its records' locks
 * before its file is there, and another slot of the same round then acquires them, finds no file
 * that names them, and logs them too. The batch must still hold each record once.
 *
 * A real broker and a real query in local mode with two task threads. The group refuses renewal and
 * locks records for 2 s; the first slot file that a round writes after the records are produced
 * takes 6 s to create, so the locks of the slot writing it lapse while it writes. The other slot's
 * poll waits up to 20 s for records, so it is still polling when they come back.
 */
@UsesLocalServices
class SameRoundRecordsSuite extends AnyFunSuite with BeforeAndAfterAll {

  private lazy val admin = LocalKafka.newAdmin()
  private lazy val spark = SparkSession.builder().master("local[2]").appName("SameRoundRecordsSuite")
    .config("spark.ui.enabled", "false")
    .config(s"spark.hadoop.fs.${SlowFirstWriteFileSystem.Scheme}.impl", classOf[SlowFirstWriteFileSystem].getName)
    .getOrCreate()

  override def afterAll(): Unit =
    try admin.close()
    finally spark.stop()

  private val recordCount = 50
  private val lock = 2.seconds

  for (strategy <- Seq("checkpoint-dedup", "two-phase-commit")) {
    test(s"$strategy: records whose lock lapsed while their slot logged them reach the batch once") {
      val topic = s"same-round-${UUID.randomUUID().toString.take(8)}"
      admin.createTopics(java.util.List.of(new NewTopic(topic, 1, 1.toShort))).all().get()
      val group = topic
      LocalKafka.setGroupConfigs(
        admin,
        group,
        "share.auto.offset.reset" -> "earliest",
        "share.renew.acknowledge.enable" -> "false"
      )
      val checkpoint = Files.createTempDirectory("same-round").toUri.getPath
      val sink = s"same_round_${UUID.randomUUID().toString.take(8)}"
      SlowFirstWriteFileSystem.armed.set(false)
      SlowFirstWriteFileSystem.delayed.set(false)
      val query = spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.share.group.id", group)
        .option("subscribe", topic)
        .option("kafka.share.parallelism", "2")
        .option("kafka.share.lock.timeout.ms", lock.toMillis.toString)
        .option("kafka.share.exactly.once.strategy", strategy)
        .option("pollTimeoutMs", "20000")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory").queryName(sink)
        .option("checkpointLocation", s"${SlowFirstWriteFileSystem.Scheme}://$checkpoint")
        .trigger(Trigger.ProcessingTime(200))
        .start()
      try {
        // Both consumers joined and caught up with the empty topic before the records come.
        eventually(timeout(60.seconds), interval(200.millis)) {
          assert(Option(query.lastProgress).exists(_.batchId >= 1))
        }
        SlowFirstWriteFileSystem.armed.set(true)
        LocalKafka.produce(topic, (0 until recordCount).map(i => s"r-$i"), oneBatch = true)
        eventually(timeout(90.seconds), interval(500.millis)) {
          assert(spark.table(sink).count() >= recordCount)
          assert(LocalKafka.lag(admin, group, topic).contains(0L))
        }
        assert(SlowFirstWriteFileSystem.delayed.get(), "no slot file was slow to write: the fault never fired")
        // A last round settles what the others acquired, if any came back once more.
        Thread.sleep(3 * lock.toMillis)
      } finally query.stop()
      assert(query.exception.isEmpty, query.exception)

      val got = spark.table(sink).collect().map(_.getString(0)).toSeq
      val lost = (0 until recordCount).map(i => s"r-$i").toSet -- got
      val duplicated = got.groupBy(identity).collect { case (v, n) if n.size > 1 => v }
      assert(lost.isEmpty && duplicated.isEmpty, s"lost ${lost.size}, duplicated ${duplicated.size} of $recordCount")
      assert(LocalKafka.lag(admin, group, topic).contains(0L))
    }
  }
}

/**
 * The local file system under scheme `slow-first-write`: once armed, the first file it creates under
 * a records log's round takes 6 s to create, as on a stalled store.
 */
final class SlowFirstWriteFileSystem extends InterceptedLocalFileSystem(SlowFirstWriteFileSystem.Scheme) {
  override protected def creating(f: Path): Unit =
    if (
      InterceptedLocalFileSystem.inRound(f) && SlowFirstWriteFileSystem.armed.get() &&
      SlowFirstWriteFileSystem.delayed.compareAndSet(false, true)
    ) {
      Thread.sleep(6000)
    }
}

object SlowFirstWriteFileSystem {
  val Scheme = "slow-first-write"
  val armed = new AtomicBoolean()
  val delayed = new AtomicBoolean()
}
