package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.{KafkaConnection, KafkaShareSourceOptions, Subscription}
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo
import org.apache.kafka.common.TopicPartition

/**
 * The driver's view of the share group, through Kafka's Admin API: group configs the options ask
 * for, the topics a pattern matches, and the backlog that tells the stream whether to run a batch.
 * Every call is bounded by `kafka.default.api.timeout.ms`, so an unreachable cluster fails the
 * call with a clear error instead of hanging it ([[OutageTolerance]] decides whether the query fails).
 * It checks what the cluster supports, and hands the rest to its parts: the client ([[AdminCalls]]),
 * the lookups ([[ShareGroupLookups]]), the group's setup at query start ([[ShareGroupSetup]]) and
 * the broker's dead-letter checks ([[BrokerDeadLetterCheck]]).
 */
private[sparkkafkashare] final class ShareGroupAdmin(connection: KafkaConnection) extends GroupAdmin
  with AutoCloseable {
  import ShareGroupConfigs._

  private val calls = new AdminCalls(connection)
  private val lookups = new ShareGroupLookups(calls)
  private val deadLetterCheck = new BrokerDeadLetterCheck(calls)
  private val setup = new ShareGroupSetup(calls, lookups, deadLetterCheck)

  /** Calls the cluster has answered so far: whether a lookup reached it, even one that needed no call. */
  override def callsAnswered: Long = calls.callsAnswered

  /** How long the driver has waited for this client's calls so far, in ms. */
  def waitedMs: Long = calls.waitedMs

  /**
   * Fails unless the cluster answers, has share groups enabled, and runs at Kafka 4.2 or later: a 4.1
   * broker (share groups in preview) refuses fetches in `share.acquire.mode=record_limit` and has no
   * RENEW, so the source would read nothing, or lose the locks of a batch longer than the lock. The
   * release is the cluster's finalized metadata.version, which every broker shares: a cluster can
   * finalize 4.2's only once all its brokers run 4.2 or later, while the answering broker alone may
   * support newer levels in the middle of a rolling upgrade. With `brokerDeadLetters` (option
   * `kafka.share.dead.letter.topic`), it also fails unless the cluster has Kafka 4.4's dead-letter
   * queues on ([[BrokerDeadLetterCheck.checkShareVersion]]).
   */
  override def checkShareGroupsEnabled(brokerDeadLetters: Boolean): Unit = {
    val features =
      calls.await("checking that share groups are enabled", calls.admin.describeFeatures().featureMetadata())
    def finalized(feature: String) =
      Option(features.finalizedFeatures().get(feature)).map(_.maxVersionLevel().toInt).getOrElse(0)
    val level = finalized("share.version")
    if (level < 1) throw KafkaShareErrors.shareGroupsDisabled(connection.bootstrapServers, level.toString)
    Some(finalized("metadata.version")).filter(_ < MetadataVersionOf42).foreach { v =>
      throw KafkaShareErrors.brokerUnsupported(connection.bootstrapServers, releaseOf(v), v)
    }
    if (brokerDeadLetters) deadLetterCheck.checkShareVersion(level)
  }

  override def configureGroup(options: KafkaShareSourceOptions, partitions: Seq[TopicPartition]): GroupLimits =
    setup.configureGroup(options, partitions)

  /** The group's limits as its configs say now (changed with `kafka-configs`, say). */
  override def groupLimits(): GroupLimits = limitsIn(lookups.groupConfigs())

  override def subscribedTopics(subscription: Subscription): Set[String] = lookups.subscribedTopics(subscription)

  def partitionStates(): Map[TopicPartition, SharePartitionOffsetInfo] = lookups.partitionStates()

  override def lags(partitions: Set[TopicPartition]): Map[TopicPartition, Option[Long]] = lookups.lags(partitions)

  override def partitionsOf(topics: Set[String]): Seq[TopicPartition] = lookups.partitionsOf(topics)

  def topicsGone(logged: Set[(String, String)]): Set[(String, String)] = lookups.topicsGone(logged)

  override def endOffsets(partitions: Set[TopicPartition]): Map[TopicPartition, Long] = lookups.endOffsets(partitions)

  override def assignedPartitions(clientIdPrefix: String): Set[TopicPartition] =
    lookups.assignedPartitions(clientIdPrefix)

  def describe(): Option[ShareGroupState] = lookups.describe()

  override def close(): Unit = calls.close()
}
