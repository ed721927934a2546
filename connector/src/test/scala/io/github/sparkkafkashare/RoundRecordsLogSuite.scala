package io.github.sparkkafkashare

import java.nio.file.Files
import java.util.concurrent.TimeUnit.SECONDS

import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration._

import io.github.sparkkafkashare.acknowledgements.{DeliveredRecordsIndex, LoggedRecord, RecordCoordinates, RoundRecordsLog}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FSDataOutputStream, Path}
import org.apache.kafka.common.TopicPartition
import org.apache.spark.util.SerializableConfiguration
import org.scalatest.funsuite.AnyFunSuite

class RoundRecordsLogSuite extends AnyFunSuite {

  private def newLog(): RoundRecordsLog =
    new RoundRecordsLog(
      Files.createTempDirectory("rounds").toString,
      new SerializableConfiguration(new Configuration())
    )

  /** Writes as a task of a running query run does: its fence lets the write through. */
  private def write(log: RoundRecordsLog)(round: Long, slot: Int, records: Seq[LoggedRecord]) =
    log.writeFirst(round, slot, records, () => ())

  private def record(partition: Int, offset: Long, deliveryCount: Int = 1) =
    LoggedRecord(RecordCoordinates("t", partition, offset), deliveryCount)

  test("a slot's file holds what its round's first writer logged, and reads back exactly") {
    val log = newLog()
    assert(write(log)(3, 0, Seq(record(0, 10), record(0, 11, deliveryCount = 2))).isEmpty)
    assert(write(log)(3, 1, Seq(record(1, 5))).isEmpty)
    // Another evaluation of the round that polled other records learns what the batch holds.
    assert(write(log)(3, 1, Seq(record(1, 6))).contains(Seq(record(1, 5))))
    assert(log.rounds().keySet == Set(3L))
    assert(log.read(3) == Map(0 -> Seq(record(0, 10), record(0, 11, deliveryCount = 2)), 1 -> Seq(record(1, 5))))
    assert(log.read(4).isEmpty)
  }

  test("a writer whose fence fails logs nothing, and leaves no file behind") {
    val log = newLog()
    val refused = intercept[IllegalStateException](log.writeFirst(
      7,
      0,
      Seq(record(0, 1)),
      () => throw new IllegalStateException("run stopped")
    ))
    assert(refused.getMessage == "run stopped")
    assert(log.read(7, 0).isEmpty && log.rounds().get(7).forall(_.slots.isEmpty))
    assert(new java.io.File(log.dir, "7").listFiles().forall(!_.getName.endsWith(".tmp")), "a temporary file was left")
  }

  test("of two writers of one slot file at once, exactly one wins, and both learn the winner's records") {
    val conf = new Configuration()
    conf.set(s"fs.${HoldingFileSystem.Scheme}.impl", classOf[HoldingFileSystem].getName)
    conf.setBoolean(s"fs.${HoldingFileSystem.Scheme}.impl.disable.cache", true)
    for (attempt <- 1 to 20) {
      val log = new RoundRecordsLog(
        s"${HoldingFileSystem.Scheme}://${Files.createTempDirectory("rounds")}",
        new SerializableConfiguration(conf)
      )
      HoldingFileSystem.barrier.set(new java.util.concurrent.CyclicBarrier(2))
      val results = Seq(Seq(record(0, 1)), Seq(record(0, 2))).map { records =>
        Future(records -> write(log)(3, 0, records))(ExecutionContext.global)
      }.map(Await.result(_, 60.seconds))
      val winners = results.collect { case (records, None) => records }
      assert(winners.size == 1, s"attempt $attempt: ${winners.size} writers won")
      assert(results.forall { case (_, lost) => lost.forall(_ == winners.head) })
      assert(log.read(3, 0).contains(winners.head))
    }
  }

  test("a slot's round that acquired nothing is logged as empty, unlike one that was never logged") {
    val log = newLog()
    write(log)(5, 0, Nil)
    assert(log.read(5, 0).contains(Nil))
    assert(log.read(5, 1).isEmpty)
    write(log)(5, 1, Seq(record(1, 4)))
    assert(log.read(5, 1).contains(Seq(record(1, 4))))
  }

  test("pruning forgets rounds whose records all lie below their share-partition start offset") {
    val log = newLog()
    write(log)(1, 0, Seq(record(0, 1), record(0, 2)))
    write(log)(2, 0, Seq(record(0, 3), record(1, 7)))
    write(log)(3, 0, Seq(record(0, 9)))
    val remembered =
      log.prune(through = 2, Map(new TopicPartition("t", 0) -> 3L, new TopicPartition("t", 1) -> 7L), _ => Set.empty)
    assert(log.rounds().keySet == Set(2L, 3L)) // round 3 is past `through`; round 2 still has offsets 3 and 7
    assert(remembered == 2)
  }

  test("a topic made again under its name: its records are not the old ones, and pruning forgets the old ones") {
    val log = newLog()
    val index = new DeliveredRecordsIndex(log)
    def of(topicId: String, offset: Long) = record(0, offset).copy(topicId = Some(topicId))
    write(log)(1, 0, Seq(of("old", 1), of("old", 2)))
    assert(log.read(1, 0).contains(Seq(of("old", 1), of("old", 2))))
    // A redelivery is the same record; offset 2 of the new topic is another record, by its id.
    assert(index.deliveredBefore(2, Seq(of("old", 1), of("new", 2))) == Set(RecordCoordinates("t", 0, 1)))
    assert(index.deliveredBefore(2, Seq(record(0, 2))) == Set(RecordCoordinates("t", 0, 2))) // an id not known
    write(log)(2, 0, Seq(of("new", 5)))
    var asked = Set.empty[(String, String)]
    val remembered = log.prune(
      through = 2,
      Map(new TopicPartition("t", 0) -> 0L),
      logged => {
        asked = logged
        logged.filter(_._2 == "old")
      }
    )
    assert(asked == Set("t" -> "old", "t" -> "new"))
    assert(remembered == 1 && log.rounds().keySet == Set(2L))
  }

  test("the executors' index finds records that earlier rounds handed over, and only those") {
    val log = newLog()
    val index = new DeliveredRecordsIndex(log)
    write(log)(1, 0, Seq(record(0, 1)))
    write(log)(2, 1, Seq(record(0, 2)))
    val candidates = Seq(1L, 2L, 3L).map(o => record(0, o))
    assert(index.deliveredBefore(2, candidates) == Set(RecordCoordinates("t", 0, 1)))
    assert(index.deliveredBefore(3, candidates) == Set(RecordCoordinates("t", 0, 1), RecordCoordinates("t", 0, 2)))
    log.delete(1)
    // A round's checks share its first listing (pruning deletes only records Kafka never delivers
    // again); the next round's lists the log again and forgets the deleted round.
    assert(index.deliveredBefore(3, candidates) == Set(RecordCoordinates("t", 0, 1), RecordCoordinates("t", 0, 2)))
    assert(index.deliveredBefore(4, candidates) == Set(RecordCoordinates("t", 0, 2)))
  }

  test("the index takes a part this JVM logged as logged, without reading its file back") {
    val log = newLog()
    val index = new DeliveredRecordsIndex(log)
    write(log)(1, 0, Seq(record(0, 1)))
    index.logged(1, 0, 0, Seq(record(0, 1)))
    // Unreadable from here on: only what the index was told can answer.
    Files.writeString(java.nio.file.Paths.get(log.dir, "1", "0.json"), "not a records file")
    val candidates = Seq(record(0, 1), record(0, 2))
    assert(index.loggedBy(1, Seq(0 -> 0), candidates) == Set(RecordCoordinates("t", 0, 1)))
    assert(index.deliveredBefore(2, candidates) == Set(RecordCoordinates("t", 0, 1)))
  }

  test("records user code released from a round's batch are not duplicates when they come back") {
    val log = newLog()
    val index = new DeliveredRecordsIndex(log)
    write(log)(1, 0, Seq(record(0, 1), record(0, 2), record(0, 3)))
    log.writeReleased(1, Seq(RecordCoordinates("t", 0, 2)))
    log.writeReleased(1, Seq(RecordCoordinates("t", 0, 2), RecordCoordinates("t", 0, 3))) // marked again: replaces
    assert(log.read(1) == Map(0 -> Seq(record(0, 1), record(0, 2), record(0, 3)))) // a replay still reads them all
    val candidates = Seq(1L, 2L, 3L).map(o => record(0, o))
    assert(index.deliveredBefore(2, candidates) == Set(RecordCoordinates("t", 0, 1)))
    // Handed to Spark again in round 2 and not released: a later redelivery is a duplicate.
    write(log)(2, 0, Seq(record(0, 2, deliveryCount = 2)))
    assert(index.deliveredBefore(3, candidates) == Set(RecordCoordinates("t", 0, 1), RecordCoordinates("t", 0, 2)))
    log.writeReleased(4, Seq(RecordCoordinates("t", 0, 9)))
    log.writeReleased(4, Nil) // marked again without a release: no file left
    assert(log.rounds().get(4).forall(_.released.isEmpty))
  }

  test("the index finds what the given slots logged for a round, and a round's batch holds each record once") {
    val log = newLog()
    val index = new DeliveredRecordsIndex(log)
    write(log)(4, 0, Seq(record(0, 1)))
    write(log)(4, 1, Seq(record(0, 2), record(0, 1, deliveryCount = 2)))
    write(log)(4, 2, Seq(record(0, 2, deliveryCount = 3), record(0, 3)))
    val candidates = Seq(1L, 2L, 3L).map(o => record(0, o))
    assert(index.loggedBy(4, Seq(2 -> 0), candidates) == Set(
      RecordCoordinates("t", 0, 2),
      RecordCoordinates("t", 0, 3)
    ))
    assert(
      index.loggedBy(4, Seq(0 -> 0, 1 -> 0), candidates) == Set(
        RecordCoordinates("t", 0, 1),
        RecordCoordinates("t", 0, 2)
      )
    )
    assert(index.loggedBy(4, Nil, candidates).isEmpty && index.loggedBy(4, Seq(5 -> 0, 0 -> 1), candidates).isEmpty)
    // Read back in a later run, a record two slots logged belongs to the lower slot.
    assert(log.readBatch(4) == Map(0 -> Seq(record(0, 1)), 1 -> Seq(record(0, 2)), 2 -> Seq(record(0, 3))))
  }

  test("after-log: a slot's round is all its parts, and once sealed no attempt adds a part") {
    val log = newLog()
    def writePart(slot: Int, part: Int, records: Seq[LoggedRecord]) = log.writeFirst(8, slot, records, () => (), part)
    assert(writePart(0, 0, Seq(record(0, 1), record(0, 2))).isEmpty && writePart(0, 1, Seq(record(0, 3))).isEmpty)
    assert(writePart(1, 0, Seq(record(0, 3, deliveryCount = 2), record(0, 4))).isEmpty)
    assert(log.read(8, 0).contains(Seq(record(0, 1), record(0, 2), record(0, 3))))
    assert(log.read(8) == Map(
      0 -> Seq(record(0, 1), record(0, 2), record(0, 3)),
      1 -> Seq(record(0, 3, 2), record(0, 4))
    ))
    assert(log.rounds()(8).slots.map { case (slot, parts) => slot -> parts.map(_.getPath.getName) } ==
      Map(0 -> Seq("0.json", "0.1.json"), 1 -> Seq("1.json")))

    // A reader that does not poll ends the round after the last part; an attempt still polling then
    // finds the end where it would log its next part, and learns that its records are not the batch's.
    assert(log.seal(8, 0, () => ()) == Seq(Seq(record(0, 1), record(0, 2)), Seq(record(0, 3))))
    assert(log.readPart(8, 0, 2).contains(Nil))
    assert(writePart(0, 2, Seq(record(0, 9))).contains(Nil))
    assert(log.seal(8, 0, () => ()) == Seq(Seq(record(0, 1), record(0, 2)), Seq(record(0, 3))), "sealed twice")
    assert(log.read(8, 0).contains(Seq(record(0, 1), record(0, 2), record(0, 3))))

    // Re-run after a restart: every slot is sealed, and a record in two slots' parts is the lower slot's.
    assert(log.sealBatch(8) == Map(0 -> Seq(record(0, 1), record(0, 2), record(0, 3)), 1 -> Seq(record(0, 4))))
    assert(log.readPart(8, 1, 1).contains(Nil))
    assert(new DeliveredRecordsIndex(log).deliveredBefore(9, (1L to 5L).map(record(0, _))) ==
      (1L to 4L).map(RecordCoordinates("t", 0, _)).toSet)
    // Pruned only once every part's records lie below the start offset.
    assert(log.prune(8, Map(new TopicPartition("t", 0) -> 4L), _ => Set.empty) == 1L)
    assert(log.prune(8, Map(new TopicPartition("t", 0) -> 5L), _ => Set.empty) == 0L && log.read(8).isEmpty)
  }

  test("listing and reading a round while other slots write their files never fails") {
    val log = newLog()
    write(log)(1, 0, Seq(record(0, 1)))
    val stop = new java.util.concurrent.atomic.AtomicBoolean(false)
    val written = new java.util.concurrent.atomic.AtomicInteger(0)
    val writerFailure = new java.util.concurrent.atomic.AtomicReference[Throwable]()
    // Other slots write their files (a temporary file, renamed into place) while slot 0 reads the round.
    val writer = new Thread(() => {
      try while (!stop.get()) { val slot = written.incrementAndGet(); write(log)(1, slot, Seq(record(1, slot))) }
      catch { case t: Throwable => writerFailure.set(t) }
    })
    writer.start()
    var mostSlotsRead = 0
    try {
      // At least 2 s, and on a busy machine on until the reads have overlapped enough writes (at most 20 s).
      val (least, most) = (System.nanoTime() + 2000000000L, System.nanoTime() + 20000000000L)
      def overlapped = written.get() > 10 && mostSlotsRead > 2
      while (System.nanoTime() < least || (!overlapped && System.nanoTime() < most)) {
        val read = log.read(1)
        assert(read(0) == Seq(record(0, 1)) && read.forall { case (slot, records) =>
          slot == 0 || records == Seq(record(1, slot))
        })
        mostSlotsRead = math.max(mostSlotsRead, read.size)
      }
    } finally { stop.set(true); writer.join() }
    Option(writerFailure.get()).foreach(failure => throw failure)
    assert(
      written.get() > 10 && mostSlotsRead > 2,
      s"the reads overlapped the writes: ${written.get()} written, at most $mostSlotsRead read"
    )
  }

  test("an unfinished write leaves no slot file behind for readers") {
    val log = newLog()
    write(log)(6, 0, Seq(record(0, 1)))
    val roundDir = new java.io.File(log.dir, "6")
    Files.writeString(new java.io.File(roundDir, ".1.json.1234.tmp").toPath, "{\"records\": [[") // a task died here
    assert(log.rounds().map { case (round, files) => round -> files.slots.keySet } == Map(6L -> Set(0)))
    assert(log.read(6) == Map(0 -> Seq(record(0, 1))) && log.read(6, 1).isEmpty)
  }
}

/**
 * The local file system under scheme `holding`, which holds two writers at each step where a check
 * could let both through: once each has created its file, and at each check whether a file exists.
 */
final class HoldingFileSystem extends InterceptedLocalFileSystem(HoldingFileSystem.Scheme) {
  private def hold(): Unit =
    try HoldingFileSystem.barrier.get().await(5, SECONDS)
    catch {
      case _: java.util.concurrent.TimeoutException | _: java.util.concurrent.BrokenBarrierException => // one writer only
    }

  override protected def created(f: Path, out: FSDataOutputStream): FSDataOutputStream = {
    hold()
    out
  }

  override def exists(f: Path): Boolean = {
    val there = super.exists(f)
    if (f.getName.endsWith(".json")) hold()
    there
  }
}

object HoldingFileSystem {
  val Scheme = "holding"
  val barrier = new java.util.concurrent.atomic.AtomicReference[java.util.concurrent.CyclicBarrier]()
}
