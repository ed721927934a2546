package io.github.sparkkafkashare.acknowledgements

import java.io.{ByteArrayOutputStream, IOException, OutputStream}
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files
import java.util.UUID
import java.util.concurrent.TimeUnit.SECONDS
import java.util.concurrent.atomic.AtomicReference

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.{InterceptedLocalFileSystem, LocalKafka}
import io.github.sparkkafkashare.LocalKafka.bootstrap
import io.github.sparkkafkashare.UsesLocalServices
import org.apache.hadoop.fs.{FSDataOutputStream, Path}
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.Trigger
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite

/**
 * A task of a logging strategy whose write of the round's records fails after its poll (the
 * checkpoint's storage refused it): the retry must return and log the records the failed attempt
 * polled, which its consumer still holds. Otherwise a later re-run of the batch, or the check for
 * redeliveries, would not know what the batch held. A real broker (`make kafka-up`, or
 * KAFKA_BOOTSTRAP_SERVERS) and a real query in local mode with task retries; only the checkpoint's
 * file system fails, once, on the first slot file that logs records.
 *
 * The same fault, with another consumer's records logged for the slot's round before the retry (as
 * a retry on another executor would log them), shows that the first records logged are the batch's:
 * the retry returns those, not the ones its own consumer holds.
 */
@UsesLocalServices
class RecordsLogWriteFailureSuite extends AnyFunSuite with BeforeAndAfterAll {

  private lazy val admin = LocalKafka.newAdmin()
  // Two task threads, and a failed task gets two retries, as on a cluster.
  private lazy val spark = SparkSession.builder().master("local[2,3]").appName("RecordsLogWriteFailureSuite")
    .config("spark.ui.enabled", "false")
    .config(s"spark.hadoop.fs.${FailingOnceFileSystem.Scheme}.impl", classOf[FailingOnceFileSystem].getName)
    .getOrCreate()

  override def afterAll(): Unit =
    try admin.close()
    finally spark.stop()

  private val recordCount = 200

  /** Drains `topic` with `strategy` through the failing-once checkpoint; returns the values the sink got. */
  private def drain(topic: String, group: String, strategy: String, options: (String, String)*): Seq[String] = {
    val checkpoint = Files.createTempDirectory("log-failure").toUri.getPath
    val sinkName = s"log_failure_${UUID.randomUUID().toString.take(8)}"
    val query = spark.readStream.format("kafka-share")
      .option("kafka.bootstrap.servers", bootstrap)
      .option("kafka.share.group.id", group)
      .option("subscribe", topic)
      .option("startingOffsets", "earliest")
      .option("kafka.share.exactly.once.strategy", strategy)
      .options(options.toMap)
      .load()
      .selectExpr("CAST(value AS STRING) AS value")
      .writeStream.format("memory").queryName(sinkName)
      .option("checkpointLocation", s"${FailingOnceFileSystem.Scheme}://$checkpoint")
      .trigger(Trigger.AvailableNow())
      .start()
    try query.awaitTermination(120000)
    finally query.stop()
    assert(query.exception.isEmpty, query.exception)
    spark.table(sinkName).collect().map(_.getString(0)).toSeq
  }

  private def assertEveryRecordOnce(got: Seq[String], topic: String, group: String): Unit = {
    val lost = (0 until recordCount).map(i => s"r-$i").toSet -- got
    val duplicated = got.groupBy(identity).collect { case (v, n) if n.size > 1 => v }
    assert(lost.isEmpty && duplicated.isEmpty, s"lost ${lost.size}, duplicated ${duplicated.size}")
    // Every record acknowledged: Kafka's lag of the share-partition (records not yet acknowledged) is 0.
    eventually(timeout(30.seconds), interval(500.millis)) {
      val lag = admin.listShareGroupOffsets(Map(group -> new ListShareGroupOffsetsSpec()).asJava)
        .partitionsToOffsetInfo(group).get(30, SECONDS).asScala.get(new TopicPartition(topic, 0)).map(_.lag())
      assert(lag.contains(java.util.Optional.of(0L)), s"lag $lag")
    }
  }

  private def newTopicAndGroup(): (String, String) = {
    val name = s"log-failure-${UUID.randomUUID().toString.take(8)}"
    (LocalKafka.oneRecordPartition(admin, name, recordCount), name)
  }

  for (strategy <- Seq("checkpoint-dedup", "two-phase-commit")) {
    test(s"$strategy: the retry of a task whose records log failed returns and logs the records it polled") {
      val (topic, group) = newTopicAndGroup()
      FailingOnceFileSystem.failed.set(null)
      FailingOnceFileSystem.beforeFailing.set(_ => ())
      val got = drain(topic, group, strategy)

      val (failedFile, failedRecords) = Option(FailingOnceFileSystem.failed.get())
        .getOrElse(fail("no slot file logging records was written: the fault never fired"))
      assertEveryRecordOnce(got, topic, group)
      // The retry logged exactly what the failed attempt had polled (offsets and delivery counts).
      val logFile = java.nio.file.Path.of(failedFile.toUri.getPath)
      assert(Files.exists(logFile), s"the retry did not log the round: no $logFile")
      val logged = RoundRecordsLog.fromJson(new String(Files.readAllBytes(logFile), UTF_8))
      def summary(records: Seq[LoggedRecord]) =
        s"${records.size} records, offsets ${records.map(_.coordinates.offset).mkString(",").take(60)}..., " +
          s"delivery counts ${records.map(_.deliveryCount).distinct.sorted.mkString(",")}"
      assert(
        logged == failedRecords,
        s"the retry logged ${summary(logged)}; the failed attempt polled ${summary(failedRecords)}"
      )
    }

    test(
      s"$strategy: a retry whose consumer holds other records than another evaluation logged returns the logged ones"
    ) {
      // As on a cluster: the attempt on executor E polls R1 and fails before logging them, keeping R1; a
      // retry on executor F polls R2 and logs them; an evaluation of the batch on E again must return R2.
      // Here a consumer of the test plays F's: it acquires R2, logs them in the slot's file, and closes
      // (as F's consumer, left behind, releases them); Spark's retry then runs where R1 is held.
      val (topic, group) = newTopicAndGroup()
      FailingOnceFileSystem.failed.set(null)
      val loggedByOther = new AtomicReference[Seq[LoggedRecord]](Nil)
      FailingOnceFileSystem.beforeFailing.set { file =>
        val other = otherExecutorsPoll(group, topic)
        Files.writeString(file, RoundRecordsLog.toJson(other))
        loggedByOther.set(other)
      }
      val got =
        try drain(
            topic,
            group,
            strategy,
            "kafka.share.parallelism" -> "1",
            "kafka.max.poll.records" -> "50",
            "kafka.share.acquire.mode" -> "record_limit"
          )
        finally FailingOnceFileSystem.beforeFailing.set(_ => ())

      val (_, polledByFailedAttempt) = Option(FailingOnceFileSystem.failed.get())
        .getOrElse(fail("no slot file logging records was written: the fault never fired"))
      assert(loggedByOther.get().nonEmpty, "the other consumer acquired nothing")
      assert(
        loggedByOther.get().map(_.coordinates).toSet.intersect(polledByFailedAttempt.map(_.coordinates).toSet).isEmpty
      )
      assertEveryRecordOnce(got, topic, group)
    }
  }

  /** Acquires up to 50 records of `topic` for `group` with a share consumer of its own, and closes it (releasing them). */
  private def otherExecutorsPoll(group: String, topic: String): Seq[LoggedRecord] = {
    val consumer =
      LocalKafka.newShareConsumer(group, "max.poll.records" -> "50", "share.acquire.mode" -> "record_limit")
    try {
      consumer.subscribe(Seq(topic).asJava)
      val deadline = System.nanoTime() + 30.seconds.toNanos
      var polled = Seq.empty[LoggedRecord]
      while (polled.isEmpty && System.nanoTime() < deadline) {
        polled = consumer.poll(java.time.Duration.ofMillis(500)).asScala.map { r =>
          LoggedRecord(RecordCoordinates(r.topic(), r.partition(), r.offset()), r.deliveryCount().get().toInt)
        }.toSeq
      }
      polled
    } finally consumer.close()
  }
}

/**
 * The local file system under scheme `failing-once`, whose first write of a round's slot file that
 * logs records fails as its content is stored, as a write to a checkpoint's storage can. What that
 * file was to hold is kept.
 */
final class FailingOnceFileSystem extends InterceptedLocalFileSystem(FailingOnceFileSystem.Scheme) {
  override protected def created(f: Path, out: FSDataOutputStream): FSDataOutputStream = {
    // A slot file is put in place from a temporary file beside it: .<slot>.json.<uuid>.tmp
    val slotFile = "\\.(\\d+\\.json)\\..*\\.tmp".r
    f.getName match {
      case slotFile(name) if InterceptedLocalFileSystem.inRound(f) =>
        val written = new ByteArrayOutputStream()
        new FSDataOutputStream(
          new OutputStream {
            override def write(b: Int): Unit = written.write(b)
            override def write(b: Array[Byte], off: Int, len: Int): Unit = written.write(b, off, len)
            override def close(): Unit = {
              val records = RoundRecordsLog.fromJson(new String(written.toByteArray, UTF_8))
              val dst = new Path(f.getParent, name)
              if (records.nonEmpty && FailingOnceFileSystem.failed.compareAndSet(null, (dst, records))) {
                out.close()
                FailingOnceFileSystem.beforeFailing.get()(pathToFile(dst).toPath)
                throw new IOException(s"injected: the checkpoint's storage refused $dst")
              }
              try out.write(written.toByteArray)
              finally out.close()
            }
          },
          null
        )
      case _ => out
    }
  }
}

object FailingOnceFileSystem {
  val Scheme = "failing-once"

  /** The slot file whose write failed, and the records it was to log. */
  val failed = new AtomicReference[(Path, Seq[LoggedRecord])]()

  /** Runs with the slot file's local path just before the write fails. */
  val beforeFailing = new AtomicReference[java.nio.file.Path => Unit](_ => ())
}
