package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import org.apache.kafka.common.TopicPartition
import org.scalatest.funsuite.AnyFunSuite

/**
 * The backlog that decides whether an idle stream plans a batch: the lags Kafka reports, partitions
 * taken as quiet after rounds that found nothing in them, and how often the subscribed topics are
 * described. A scripted [[GroupAdmin]] stands in for Kafka: no broker.
 */
class BacklogSuite extends AnyFunSuite {
  private def tp(topic: String, partition: Int) = new TopicPartition(topic, partition)
  private val t0 = tp("t", 0)
  private val t1 = tp("t", 1)
  private val t2 = tp("t", 2)
  private val t3 = tp("t", 3)
  private val LongLock = TimeUnit.SECONDS.toNanos(30)

  /** A short lock duration, for the rules about time since rounds that found nothing. */
  private val ShortLock = TimeUnit.MILLISECONDS.toNanos(150)

  private val clock = new ManualClock

  /** Time passes, past a [[ShortLock]]. */
  private def pastALock(): Unit = clock.advance(ShortLock + 1)

  private def setUp(lockNanos: Long = LongLock): (FakeGroupAdmin, Backlog) = {
    val admin = new FakeGroupAdmin
    admin.partitionCounts = Map("t" -> 2)
    (admin, new Backlog(admin, "kafka-share-g-run", () => lockNanos, clock))
  }

  /** One partition with 5 records left by Kafka's count, assigned to this run's consumers, at end offset 100. */
  private def withStaleLag(lockNanos: Long = LongLock): (FakeGroupAdmin, Backlog) = {
    val (admin, backlog) = setUp(lockNanos)
    admin.partitionCounts = Map("t" -> 1)
    admin.lagsNow = Map(t0 -> Some(5L))
    admin.endOffsetsNow = Map(t0 -> 100L)
    admin.assigned = Set(t0)
    assert(backlog.refresh(Set("t")).contains(5L))
    (admin, backlog)
  }

  /** A round that waits the full poll timeout begins, and ends having acquired nothing. */
  private def roundFindsNothing(backlog: Backlog): Unit = backlog.roundFoundNothing(backlog.roundStart())

  test("refresh sums the lags Kafka reports for the partitions of the given topics") {
    val (admin, backlog) = setUp()
    admin.partitionCounts = Map("t" -> 2, "u" -> 1)
    admin.lagsNow = Map(t0 -> Some(5L), t1 -> Some(3L), tp("u", 0) -> Some(0L))
    assert(backlog.refresh(Set("t", "u")).contains(8L))
    admin.lagsNow += tp("u", 0) -> Some(4L)
    assert(backlog.refresh(Set("t", "u")).contains(12L))
    assert(backlog.refresh(Set("u")).contains(4L))
  }

  test("refresh is None when Kafka reports no lag for one of the partitions") {
    val (admin, backlog) = setUp()
    admin.lagsNow = Map(t0 -> Some(5L), t1 -> None)
    assert(backlog.refresh(Set("t")).isEmpty)
    admin.lagsNow = Map(t0 -> Some(5L), t1 -> Some(0L))
    assert(backlog.refresh(Set("t")).contains(5L))
  }

  test("topics without partitions have no backlog, and their lags are not asked for") {
    val (admin, backlog) = setUp()
    assert(backlog.refresh(Set("missing")).contains(0L))
    assert(backlog.refresh(Set.empty).contains(0L))
    assert(admin.callsOf("lags") == 0)
  }

  test("partitionCount is the number of partitions the topics had when last described") {
    val (admin, backlog) = setUp()
    assert(backlog.partitionCount.isEmpty, "not described yet")
    admin.partitionCounts = Map("t" -> 2, "u" -> 3)
    backlog.refresh(Set("t", "u"))
    assert(backlog.partitionCount.contains(5))
    backlog.refresh(Set("u"))
    assert(backlog.partitionCount.contains(3))
  }

  test("a round's start notes the partitions with records left that this run's consumers are assigned") {
    val (admin, backlog) = setUp()
    admin.partitionCounts = Map("t" -> 4)
    admin.lagsNow = Map(t0 -> Some(5L), t1 -> Some(0L), t2 -> None, t3 -> Some(4L))
    admin.endOffsetsNow = Map(t0 -> 100L, t1 -> 50L, t2 -> 7L, t3 -> 40L)
    admin.assigned = Set(t0, t1, t2) // t3 is another member's
    assert(backlog.refresh(Set("t")).isEmpty)
    val start = backlog.roundStart()
    assert(start.keySet == Set(t0, t2), "t1 has nothing left, t3 is not this run's")
    assert(start(t0).lag.contains(5L) && start(t0).endOffset == 100L)
    assert(start(t2).lag.isEmpty && start(t2).endOffset == 7L)
    backlog.roundFoundNothing(start)
    assert(backlog.refresh(Set("t")).contains(4L), "t0 and t2 are quiet; another member's t3 still counts")
  }

  test("a round's start makes no Admin call when no partition has records left") {
    val (admin, backlog) = setUp()
    admin.lagsNow = Map(t0 -> Some(0L), t1 -> Some(0L))
    backlog.refresh(Set("t"))
    assert(backlog.roundStart().isEmpty)
    assert(admin.callsOf("assignedPartitions") == 0 && admin.callsOf("endOffsets") == 0)
  }

  test("a partition whose round found nothing is quiet while its lag and end offset stay the same") {
    val (_, backlog) = withStaleLag()
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L))
    assert(backlog.refresh(Set("t")).contains(0L))
  }

  test("a quiet partition counts again once its lag changes, and stays counted if the lag goes back") {
    val (admin, backlog) = withStaleLag()
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L))
    admin.lagsNow = Map(t0 -> Some(6L))
    assert(backlog.refresh(Set("t")).contains(6L))
    admin.lagsNow = Map(t0 -> Some(5L))
    assert(
      backlog.refresh(Set("t")).contains(5L),
      "the partition is no longer quiet: it needs another round that finds nothing"
    )
  }

  test("a quiet partition counts again once its log end offset changes") {
    val (admin, backlog) = withStaleLag()
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L))
    admin.endOffsetsNow = Map(t0 -> 101L)
    assert(backlog.refresh(Set("t")).contains(5L))
    admin.endOffsetsNow = Map(t0 -> 100L)
    assert(backlog.refresh(Set("t")).contains(5L))
  }

  test("a quiet partition's lag counts again a lock duration after the last round that found nothing") {
    val (_, backlog) = withStaleLag(ShortLock)
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L))
    pastALock()
    assert(backlog.refresh(Set("t")).contains(5L), "what another member held may have come back")
  }

  test("the lock duration counts from the end of the last round that found nothing, not the first") {
    val (_, backlog) = withStaleLag(ShortLock)
    roundFindsNothing(backlog)
    pastALock()
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L), "the second round ended just now")
    pastALock()
    assert(backlog.refresh(Set("t")).contains(5L))
  }

  test("a quiet partition whose lag Kafka does not report stays quiet past a lock duration") {
    val (admin, backlog) = setUp(ShortLock)
    admin.partitionCounts = Map("t" -> 1)
    admin.endOffsetsNow = Map(t0 -> 100L)
    admin.assigned = Set(t0)
    assert(backlog.refresh(Set("t")).isEmpty, "no lag reported")
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L))
    pastALock()
    assert(backlog.refresh(Set("t")).contains(0L))
    assert(backlog.quietForALock, "only partitions quiet with a reported lag wait for a lock duration")
    admin.endOffsetsNow = Map(t0 -> 101L)
    assert(backlog.refresh(Set("t")).isEmpty, "records arrived")
  }

  test("quietForALock holds once every quiet partition has been quiet for a lock duration, over several rounds") {
    val (admin, backlog) = withStaleLag(ShortLock)
    assert(backlog.quietForALock, "no partition is quiet")
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L))
    assert(!backlog.quietForALock, "quiet since a round that began just now")
    pastALock()
    roundFindsNothing(backlog) // the same lag and end offset: quiet since the first round
    assert(backlog.refresh(Set("t")).contains(0L))
    assert(backlog.quietForALock)
    // Once the partition leaves the quiet ones and a round finds nothing again, its quiet time starts afresh.
    admin.endOffsetsNow = Map(t0 -> 101L)
    assert(backlog.refresh(Set("t")).contains(5L))
    roundFindsNothing(backlog)
    assert(backlog.refresh(Set("t")).contains(0L))
    assert(!backlog.quietForALock)
  }

  test("the topics are described once while they stay the same and each has partitions") {
    val (admin, backlog) = setUp()
    admin.lagsNow = Map(t0 -> Some(1L), t1 -> Some(1L))
    (1 to 3).foreach(_ => assert(backlog.refresh(Set("t")).contains(2L)))
    assert(admin.callsOf("partitionsOf") == 1)
    assert(admin.callsOf("lags") == 3, "the lags are asked every time")
    // A partition added meanwhile is not seen until the topics are described again.
    admin.partitionCounts = Map("t" -> 3)
    admin.lagsNow += t2 -> Some(1L)
    assert(backlog.refresh(Set("t")).contains(2L))
    assert(backlog.partitionCount.contains(2))
  }

  test("the topics are described again when they change") {
    val (admin, backlog) = setUp()
    admin.partitionCounts = Map("t" -> 2, "u" -> 1)
    backlog.refresh(Set("t"))
    backlog.refresh(Set("t", "u"))
    assert(admin.callsOf("partitionsOf") == 2)
    assert(backlog.partitionCount.contains(3))
    backlog.refresh(Set("t"))
    assert(admin.callsOf("partitionsOf") == 3)
  }

  test("topics are described at every refresh while one of them has no partitions") {
    val (admin, backlog) = setUp()
    backlog.refresh(Set("t", "new"))
    backlog.refresh(Set("t", "new"))
    assert(admin.callsOf("partitionsOf") == 2)
    admin.partitionCounts += "new" -> 2
    admin.lagsNow = Map(t0 -> Some(0L), t1 -> Some(0L), tp("new", 0) -> Some(3L), tp("new", 1) -> Some(4L))
    assert(backlog.refresh(Set("t", "new")).contains(7L), "the new topic's partitions are read as soon as it has them")
    assert(backlog.partitionCount.contains(4))
    backlog.refresh(Set("t", "new"))
    assert(admin.callsOf("partitionsOf") == 3)
  }

  test("the topics are described again once PartitionsRefreshNanos have passed") {
    val (admin, backlog) = setUp()
    backlog.refresh(Set("t"))
    clock.advance(Backlog.PartitionsRefreshNanos - TimeUnit.SECONDS.toNanos(1))
    backlog.refresh(Set("t"))
    assert(admin.callsOf("partitionsOf") == 1, "not due yet")
    admin.partitionCounts = Map("t" -> 3)
    clock.advance(TimeUnit.SECONDS.toNanos(2))
    backlog.refresh(Set("t"))
    assert(admin.callsOf("partitionsOf") == 2)
    assert(backlog.partitionCount.contains(3))
  }
}
