package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.{KafkaShareSourceOptions, Subscription}
import org.apache.kafka.common.TopicPartition

/**
 * The Admin calls that decide when a run polls ([[Backlog]], [[RoundPolicy]], [[OutageTolerance]])
 * and how its consumers are set up ([[GroupFollower]], [[SubscribedTopics]]). [[ShareGroupAdmin]] makes
 * them of Kafka; a call that cannot reach the cluster throws `KAFKA_SHARE_BROKER_UNREACHABLE`.
 */
private[sparkkafkashare] trait GroupAdmin {

  /** Calls the cluster has answered so far: whether a lookup reached it, even one that needed no call. */
  def callsAnswered: Long

  /**
   * Fails unless the cluster has share groups enabled and runs at Kafka 4.2 or later, and, with
   * `brokerDeadLetters`, has Kafka 4.4's dead-letter queues on (share.version 2).
   */
  def checkShareGroupsEnabled(brokerDeadLetters: Boolean): Unit

  /** Applies the group configs the options translate to, and starts `partitions` the group has not read; returns the group's limits. */
  def configureGroup(options: KafkaShareSourceOptions, partitions: Seq[TopicPartition]): GroupLimits

  /** The group's limits as its configs say now. */
  def groupLimits(): GroupLimits

  /** The topics the subscription names that exist now. */
  def subscribedTopics(subscription: Subscription): Set[String]

  /** The partitions of `topics`; a topic that does not exist has none. */
  def partitionsOf(topics: Set[String]): Seq[TopicPartition]

  /** Per partition, the records the group has yet to finish, or None where Kafka cannot say. */
  def lags(partitions: Set[TopicPartition]): Map[TopicPartition, Option[Long]]

  /** The log end offset of each partition. */
  def endOffsets(partitions: Set[TopicPartition]): Map[TopicPartition, Long]

  /** Partitions assigned to caught-up members whose client id starts with `clientIdPrefix`. */
  def assignedPartitions(clientIdPrefix: String): Set[TopicPartition]
}
