package io.github.sparkkafkashare.acknowledgements

import java.net.{ServerSocket, URI}
import java.net.http.{HttpClient, HttpRequest, HttpResponse}
import java.nio.file.{Files, Path => LocalPath}
import java.util.UUID
import java.util.concurrent.{CyclicBarrier, TimeUnit}

import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration._

import io.github.sparkkafkashare.UsesLocalServices
import org.apache.hadoop.conf.Configuration
import org.apache.spark.util.SerializableConfiguration
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * The records log on S3, through Hadoop's S3A client, against moto's S3 emulator
 * (integration-tests/s3_emulator.py, which this suite starts on a free loopback port; it serves one
 * request at a time, so that a conditional write is one step, as on S3). There a file appears whole as
 * its stream closes, and a slot file is written in place: of writers that create one slot file at the
 * same moment, exactly one's file lands and every writer takes its records, by S3's conditional write
 * (`If-None-Match`), where S3A's check as the stream opens let two writers that opened together both win.
 */
@UsesLocalServices
class LogFilesObjectStoreSuite extends AnyFunSuite with BeforeAndAfterAll {
  private val port = {
    val s = new ServerSocket(0);
    try s.getLocalPort
    finally s.close()
  }
  private val bucket = "kafka-share-tests"
  private var moto: Process = _

  override def beforeAll(): Unit = {
    val python = sys.env.getOrElse("S3_EMULATOR_PYTHON", "python3")
    val server = sys.env.getOrElse("S3_EMULATOR", "integration-tests/s3_emulator.py")
    assert(Files.isExecutable(LocalPath.of(python)), s"$python not found: run `make venv`, which installs moto")
    val log = Files.createTempFile("moto", ".log").toFile
    moto = new ProcessBuilder(python, server, "-H", "127.0.0.1", "-p", port.toString).redirectErrorStream(true)
      .redirectOutput(log).start()
    val http = HttpClient.newHttpClient()
    val createBucket = HttpRequest.newBuilder(URI.create(s"http://127.0.0.1:$port/$bucket"))
      .PUT(HttpRequest.BodyPublishers.noBody()).build()
    val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
    var created = false
    while (!created) {
      created =
        try http.send(createBucket, HttpResponse.BodyHandlers.discarding()).statusCode() == 200
        catch {
          case _: java.io.IOException if System.nanoTime() < deadline => Thread.sleep(200); false
        }
    }
  }

  override def afterAll(): Unit = if (moto != null) { moto.destroy(); moto.waitFor(30, TimeUnit.SECONDS) }

  private def newLog(): RoundRecordsLog = {
    val conf = new Configuration()
    Map(
      "fs.s3a.endpoint" -> s"http://127.0.0.1:$port",
      "fs.s3a.endpoint.region" -> "us-east-1",
      "fs.s3a.path.style.access" -> "true",
      "fs.s3a.connection.ssl.enabled" -> "false",
      "fs.s3a.access.key" -> "test",
      "fs.s3a.secret.key" -> "test",
      "fs.s3a.aws.credentials.provider" -> "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
      "fs.s3a.attempts.maximum" -> "1",
      "fs.s3a.retry.limit" -> "1"
    ).foreach { case (k, v) => conf.set(k, v) }
    new RoundRecordsLog(s"s3a://$bucket/${UUID.randomUUID()}/kafka-share-rounds", new SerializableConfiguration(conf))
  }

  private def record(offset: Long) = LoggedRecord(RecordCoordinates("t", 0, offset), 1, Some("topic-id"))

  test("a slot's file written in place reads back exactly, and a round's files list whole") {
    val log = newLog()
    log.refuseNonAtomicCreate("two-phase-commit") // S3A from Hadoop 3.4.2 writes conditionally: atomic
    assert(log.writeFirst(3, 0, Seq(record(1), record(2)), () => ()).isEmpty)
    assert(log.writeFirst(3, 1, Nil, () => ()).isEmpty)
    assert(log.writeFirst(3, 0, Seq(record(9)), () => ()).contains(Seq(record(1), record(2))))
    assert(log.rounds().view.mapValues(_.slots.keySet).toMap == Map(3L -> Set(0, 1)))
    assert(log.read(3) == Map(0 -> Seq(record(1), record(2)), 1 -> Nil))
  }

  test("of two writers of one slot file at once, at most one wins, and both take the file's records") {
    for (attempt <- 1 to 10) {
      val log = newLog()
      // Held together just before the file is written: each then opens, writes and closes its stream.
      val together = new CyclicBarrier(2)
      val results = Seq(Seq(record(1)), Seq(record(2))).map { records =>
        Future(records -> log.writeFirst(3, 0, records, () => together.await(30, TimeUnit.SECONDS)))(
          ExecutionContext.global
        )
      }.map(Await.result(_, 60.seconds))
      val inFile = log.read(3, 0)
      val outcomes = results.map { case (records, first) => s"${records.head.coordinates.offset}: $first" }
        .mkString(
          s"(attempt $attempt; the file holds $inFile; each writer: its outcome, None if it wrote the file: ",
          ", ",
          ")"
        )
      // A writer whose conditional write was retried can be refused by its own write, and so take its
      // own records as another's: the slot's records still agree. Two writers that both wrote do not.
      assert(results.count(_._2.isEmpty) <= 1, outcomes)
      assert(results.forall { case (records, first) => inFile.contains(first.getOrElse(records)) }, outcomes)
    }
  }
}
