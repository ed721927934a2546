package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import org.apache.kafka.common.TopicPartition

/**
 * Whether the share group has records this query should poll for, so an idle stream plans no
 * batches. Kafka reports a lag per share-partition, but none for a partition whose share state it
 * has not persisted yet (a new group at `latest` that has read nothing), and a lag it reports may
 * count records this query cannot have: records another member of the group holds, or none at all,
 * since Kafka persists the lag with each state write and two acknowledgements of one partition
 * written at once can leave the smaller count last until the partition's next write.
 *
 * So a partition with records left by Kafka's count is taken as empty ("quiet") once a round that
 * had it assigned to this query's consumers, and waited the full poll timeout (each of its tasks ran,
 * and no consumer joined the group in it: a first poll is shorter), acquired nothing, for as long as
 * its log end offset and its reported lag stay what they were when that round began.
 * Records another member held come back when their lock expires, without Kafka's count changing, so
 * a reported lag counts again a lock duration after the end of the last round that found nothing,
 * until a round finds nothing again; and a drain (Trigger.AvailableNow) ends on quiet partitions
 * only once they have been quiet for a lock duration ([[quietForALock]]), long enough for the locks
 * of a member that died to expire.
 *
 * @param clientIdPrefix the client id prefix of this query run's consumers
 * @param lockNanos      the group's acquisition lock duration, as last read
 * @param clock          the driver's time ([[NanoClock]])
 */
private[sparkkafkashare] final class Backlog(
    admin: GroupAdmin,
    clientIdPrefix: String,
    lockNanos: () => Long,
    clock: NanoClock = NanoClock.System
) {
  import Backlog._

  private var seen = Seen(lags = Map.empty, quiet = Map.empty)
  private var described: Option[DescribedTopics] = None

  /** Records left for this query in `topics`; None when Kafka cannot say and they may hold some. */
  def refresh(topics: Set[String]): Option[Long] = {
    val lags = admin.lags(partitionsOf(topics))
    // A partition with lag 0 leaves the quiet ones too.
    seen = Seen(lags, seen.quiet.filter { case (tp, q) => lags.get(tp).contains(q.lag) })
    val ends = admin.endOffsets(seen.quiet.keySet)
    seen = seen.copy(quiet = seen.quiet.filter { case (tp, q) => ends.get(tp).contains(q.endOffset) })
    val now = clock.nanoTime()
    val counted = lags.filter { case (tp, _) =>
      !seen.quiet.get(tp).exists(q => q.lag.isEmpty || now - q.probedAt <= lockNanos())
    }
    if (counted.values.exists(_.isEmpty)) None else Some(counted.values.flatten.sum)
  }

  /** How many partitions the subscribed topics had when last described (every [[PartitionsRefreshNanos]] at most). */
  def partitionCount: Option[Int] = described.map(_.partitions.size)

  /** Whether every partition quiet with a reported lag has been so for a lock duration, as of the last refresh or round that found nothing. */
  def quietForALock: Boolean = {
    val now = clock.nanoTime()
    seen.quiet.values.forall(q => q.lag.isEmpty || now - q.since >= lockNanos())
  }

  /** Taken when a round that waits the full poll timeout is planned: the partitions with records left that its consumers will fetch. */
  def roundStart(): Map[TopicPartition, PartitionAtRoundStart] = {
    val now = clock.nanoTime()
    val candidates = pending
    if (candidates.isEmpty) Map.empty
    else admin.endOffsets(candidates intersect admin.assignedPartitions(clientIdPrefix)).map { case (tp, end) =>
      tp -> PartitionAtRoundStart(seen.lags(tp), end, now)
    }
  }

  /**
   * The round that began with `atRoundStart` has ended, and acquired nothing: told once a round. What
   * another member held as it ended comes back within a lock duration from now.
   */
  def roundFoundNothing(atRoundStart: Map[TopicPartition, PartitionAtRoundStart]): Unit = {
    val now = clock.nanoTime()
    seen = seen.copy(quiet = seen.quiet ++ atRoundStart.map { case (tp, start) =>
      val since =
        seen.quiet.get(tp).filter(q => q.lag == start.lag && q.endOffset == start.endOffset).fold(start.at)(_.since)
      tp -> Quiet(start.lag, start.endOffset, since, probedAt = now)
    })
  }

  /** Partitions Kafka does not report as done: no lag known, or records left. */
  private def pending: Set[TopicPartition] = seen.lags.collect { case (tp, lag) if lag.forall(_ > 0) => tp }.toSet

  /**
   * The partitions of `topics`, described again only when the topics change, one of them had none
   * (not created yet), or [[PartitionsRefreshNanos]] have passed, so that most backlog checks are one
   * Admin lookup instead of two. A partition added to a topic is assigned to a member at its next
   * heartbeat (every 5 s by default), so describing it sooner would not read it sooner.
   */
  private def partitionsOf(topics: Set[String]): Set[TopicPartition] = describe(topics).partitions

  private def describe(topics: Set[String]): DescribedTopics = {
    val now = clock.nanoTime()
    val current = described.filter { d =>
      d.topics == topics && now - d.at <= PartitionsRefreshNanos &&
      topics.forall(topic => d.partitions.exists(_.topic() == topic))
    }
    current.getOrElse {
      val fresh = DescribedTopics(topics, admin.partitionsOf(topics).toSet, now)
      described = Some(fresh)
      fresh
    }
  }
}

private[sparkkafkashare] object Backlog {

  /** A partition as Kafka reported it when a round began: its lag (None: unreported) and log end offset. */
  final case class PartitionAtRoundStart(lag: Option[Long], endOffset: Long, at: Long)

  /**
   * The lags Kafka last reported, and the partitions where rounds found nothing while Kafka said the
   * same of them ("quiet").
   */
  private final case class Seen(lags: Map[TopicPartition, Option[Long]], quiet: Map[TopicPartition, Quiet])

  /** A partition rounds found nothing in since `since` (a round's start), the last one ending at `probedAt`. */
  private final case class Quiet(lag: Option[Long], endOffset: Long, since: Long, probedAt: Long)

  val PartitionsRefreshNanos: Long = TimeUnit.SECONDS.toNanos(5)

  private final case class DescribedTopics(topics: Set[String], partitions: Set[TopicPartition], at: Long)
}
