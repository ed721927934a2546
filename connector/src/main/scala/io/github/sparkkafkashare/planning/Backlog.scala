package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import org.apache.kafka.common.TopicPartition

/**
 * Whether the share group has records this query should poll for, so an idle stream plans no
 * batches. Kafka reports a lag per share-partition, but none for a partition whose share state it
 * has not persisted yet (a new group at `latest` that has read nothing). Such a partition counts as
 * empty once a round that had it assigned to this query's consumers, and waited the full poll
 * timeout, acquired nothing, and its log has not grown since that round began.
 *
 * @param clientIdPrefix the client id prefix of this query run's consumers
 */
private[sparkkafkashare] final class Backlog(admin: ShareGroupAdmin, clientIdPrefix: String) {
  import Backlog._

  private var lags: Map[TopicPartition, Option[Long]] = Map.empty
  /** End offsets of unreported partitions as of the start of a round that found nothing in them. */
  private var quiet: Map[TopicPartition, Long] = Map.empty
  private var described: Option[DescribedTopics] = None

  /** Records left for the group in `topics`; None when Kafka cannot say and they may hold some. */
  def refresh(topics: Set[String]): Option[Long] = {
    lags = admin.lags(partitionsOf(topics))
    val unreported = lags.collect { case (tp, None) => tp }.toSet
    val known = lags.values.flatten.sum
    if (unreported.isEmpty) Some(known)
    else {
      val ends = admin.endOffsets(unreported.filter(quiet.contains))
      if (unreported.forall(tp => ends.get(tp).exists(quiet.get(tp).contains))) Some(known) else None
    }
  }

  /** Taken when a round is planned: the unreported partitions its consumers will fetch, with their end offsets. */
  def roundStart(): Map[TopicPartition, Long] = {
    val unreported = lags.collect { case (tp, None) => tp }.toSet
    if (unreported.isEmpty) Map.empty
    else admin.endOffsets(unreported intersect admin.assignedPartitions(clientIdPrefix))
  }

  /** The round that began with `atRoundStart` acquired nothing. */
  def roundFoundNothing(atRoundStart: Map[TopicPartition, Long]): Unit = quiet ++= atRoundStart

  /**
   * The partitions of `topics`, described again only when the topics change, one of them had none
   * (not created yet), or [[PartitionsRefreshNanos]] have passed, so that most backlog checks are one
   * Admin lookup instead of two. A partition added to a topic is assigned to a member at its next
   * heartbeat (every 5 s by default), so describing it sooner would not read it sooner.
   */
  private def partitionsOf(topics: Set[String]): Set[TopicPartition] = {
    val now = System.nanoTime()
    val current = described.filter { d =>
      d.topics == topics && now - d.at <= PartitionsRefreshNanos &&
        topics.forall(topic => d.partitions.exists(_.topic() == topic))
    }
    current.getOrElse {
      val fresh = DescribedTopics(topics, admin.partitionsOf(topics).toSet, now)
      described = Some(fresh)
      fresh
    }.partitions
  }
}

private object Backlog {
  val PartitionsRefreshNanos: Long = TimeUnit.SECONDS.toNanos(5)

  private final case class DescribedTopics(topics: Set[String], partitions: Set[TopicPartition], at: Long)
}
