package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.Parsing

/** The share-group configs the source reads and sets, Kafka's defaults for them, and the limits they give a query. */
private[sparkkafkashare] object ShareGroupConfigs {
  val LockDurationConfig = "share.record.lock.duration.ms"
  val RenewAllowedConfig = "share.renew.acknowledge.enable"

  /** The metadata.version feature level of Kafka 4.2-IV0, the first release the source supports. */
  val MetadataVersionOf42 = 28
  val RecordLocksConfig = "share.partition.max.record.locks"
  val AssignmentIntervalConfig = "share.assignment.interval.ms"

  /** Kafka's default for `group.share.partition.max.record.locks`, if a group's configs lack it. */
  val DefaultRecordLocksPerPartition = 2000

  /** Kafka's default for `group.share.record.lock.duration.ms`, if a group's configs lack it. */
  val DefaultLockDurationMs = 30000L

  /** Kafka's default for `group.share.assignment.interval.ms`, if a group's configs lack it. */
  val DefaultAssignmentIntervalMs = 1000L
  val AutoOffsetResetConfig = "share.auto.offset.reset"

  /** Kafka's default for `share.auto.offset.reset`. */
  val DefaultAutoOffsetReset = "latest"

  /** The share.version feature level of Kafka 4.4's dead-letter queues (KIP-1191). */
  val ShareVersionOfDeadLetters = 2

  /** Group configs of the broker's dead-letter queue (Kafka 4.4's GroupConfig). */
  val DeadLetterTopicConfig = "errors.deadletterqueue.topic.name"
  val DeadLetterCopyRecordConfig = "errors.deadletterqueue.copy.record.enable"

  /** The topic config without which the broker writes no dead letters to a topic (Kafka 4.4's LogConfig). */
  val DeadLetterTopicEnableConfig = "errors.deadletterqueue.group.enable"

  /** Broker configs: the prefix every dead-letter topic's name must have, and whether the broker creates a missing one. */
  val DeadLetterTopicPrefixConfig = "errors.deadletterqueue.topic.name.prefix"
  val DeadLetterAutoCreateConfig = "errors.deadletterqueue.auto.create.topics.enable"

  /** Kafka's default for [[DeadLetterTopicPrefixConfig]]. */
  val DefaultDeadLetterTopicPrefix = "dlq."

  /** Kafka describes a group's every config, with the broker's defaults for those the group does not set. */
  def limitsIn(configs: Map[String, String]): GroupLimits = GroupLimits(
    renewAllowed = configs.get(RenewAllowedConfig).forall(_.toBoolean),
    recordLocksPerPartition =
      configs.get(RecordLocksConfig).flatMap(Parsing.int).getOrElse(DefaultRecordLocksPerPartition),
    lockDurationMs = configs.get(LockDurationConfig).flatMap(Parsing.long).getOrElse(DefaultLockDurationMs),
    assignmentIntervalMs =
      configs.get(AssignmentIntervalConfig).flatMap(Parsing.long).getOrElse(DefaultAssignmentIntervalMs)
  )

  /** The Kafka release whose brokers support metadata.version levels up to `level`, for levels below 4.2's. */
  def releaseOf(level: Int): String = if (level >= 26) "4.1" else if (level >= 22) "4.0" else "3.x"
}
