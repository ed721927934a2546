package io.github.sparkkafkashare.planning

import java.util.Locale
import java.util.concurrent.ExecutionException

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.kafka.clients.admin.{AlterConfigOp, ConfigEntry, OffsetSpec}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.config.ConfigResource
import org.apache.spark.internal.Logging

/**
 * The share group's setup at query start: the group configs the options ask for, the broker's
 * dead-letter topic once [[BrokerDeadLetterCheck]] finds it usable, and the start of the
 * share-partitions the group has not read.
 */
private[planning] final class ShareGroupSetup(
    calls: AdminCalls,
    lookups: ShareGroupLookups,
    deadLetterCheck: BrokerDeadLetterCheck
) extends Logging {
  import calls.{admin, await}
  import ShareGroupConfigs._

  private val group = calls.connection.groupId

  /**
   * Applies the group configs that options translate to: `kafka.share.lock.timeout.ms`,
   * `kafka.share.partition.max.record.locks` and `kafka.share.assignment.interval.ms` always, and
   * `startingOffsets` only to a group that has not started reading yet (Kafka applies
   * `share.auto.offset.reset` only when a share-partition is first initialized), and the broker's
   * dead-letter topic of `kafka.share.dead.letter.topic` once [[BrokerDeadLetterCheck.checkTopic]]
   * finds the broker can write it. Then starts the share-partitions of `partitions` the group has no
   * state for ([[startNewPartitions]]). Returns
   * the limits that shape the query's rounds: the group's, with the values the options just set
   * (not read back: another broker may not have the change yet).
   */
  def configureGroup(options: KafkaShareSourceOptions, partitions: Seq[TopicPartition]): GroupLimits = {
    val states = lookups.partitionStates()
    val configs = lookups.groupConfigs()
    val lock = options.lockTimeoutMs.map(ms =>
      (KafkaShareSourceOptions.LockTimeoutMs, new ConfigEntry(LockDurationConfig, ms.toString))
    )
    val recordLocks = options.partitionMaxRecordLocks.map(n =>
      (KafkaShareSourceOptions.PartitionMaxRecordLocks, new ConfigEntry(RecordLocksConfig, n.toString))
    )
    val assignmentInterval = options.assignmentIntervalMs.map(ms =>
      (KafkaShareSourceOptions.AssignmentIntervalMs, new ConfigEntry(AssignmentIntervalConfig, ms.toString))
    )
    val reset = options.startingOffsets.flatMap { starting =>
      if (states.isEmpty) {
        Some((
          KafkaShareSourceOptions.StartingOffsetsOption,
          new ConfigEntry(AutoOffsetResetConfig, starting.groupConfigValue)
        ))
      } else {
        logWarning(s"Share group '$group' has already started reading, so it keeps its position; " +
          s"option '${KafkaShareSourceOptions.StartingOffsetsOption}' applies only to a new group.")
        None
      }
    }
    options.brokerDeadLetters.foreach(d => deadLetterCheck.checkTopic(d.topic))
    val deadLetters = options.brokerDeadLetters.toSeq.flatMap { d =>
      (KafkaShareSourceOptions.DeadLetterTopic, new ConfigEntry(DeadLetterTopicConfig, d.topic)) +:
        d.copyRecord.toSeq.map(copy =>
          (KafkaShareSourceOptions.DeadLetterCopyRecord, new ConfigEntry(DeadLetterCopyRecordConfig, copy.toString))
        )
    }
    val resource = new ConfigResource(ConfigResource.Type.GROUP, group)
    (lock ++ recordLocks ++ assignmentInterval ++ reset ++ deadLetters).foreach { case (option, entry) =>
      val op = new AlterConfigOp(entry, AlterConfigOp.OpType.SET)
      try {
        await(
          s"setting ${entry.name()} of share group '$group' for option '$option'",
          admin.incrementalAlterConfigs(Map(resource -> (Seq(op).asJavaCollection)).asJava).all()
        )
      } catch {
        case e: ExecutionException =>
          throw KafkaShareErrors.groupConfigFailed(group, s"${entry.name()}=${entry.value()}", option, e)
      }
      logInfo(s"Set ${entry.name()}=${entry.value()} on share group '$group' (option '$option')")
    }
    val resetInEffect = reset.map(_._2.value()).orElse(configs.get(AutoOffsetResetConfig))
    startNewPartitions(partitions.filterNot(states.contains), resetInEffect)
    val current = limitsIn(configs)
    current.copy(
      recordLocksPerPartition = options.partitionMaxRecordLocks.getOrElse(current.recordLocksPerPartition),
      lockDurationMs = options.lockTimeoutMs.getOrElse(current.lockDurationMs),
      assignmentIntervalMs = options.assignmentIntervalMs.fold(current.assignmentIntervalMs)(_.toLong)
    )
  }

  /**
   * Gives each share-partition the group has no state for its start offset now, where
   * `share.auto.offset.reset` says (`earliest` or `latest`, as Kafka reads them), before any consumer
   * of the query joins. Kafka would initialize them itself once a member joins, but only a few
   * seconds later, answering the member's first heartbeats with no partitions meanwhile: a new
   * group's first records came about 6 s after its consumer started, and under 1 s when the group's
   * offsets had been set first (Kafka 4.3.1; docs/benchmarks.md, "Joining the group").
   * Kafka alters a group's offsets only while the group has no members, so a member that joins
   * meanwhile cannot have its position moved. Anything Kafka refuses, and a `by_duration` reset, is
   * left to Kafka's own initialization.
   */
  private def startNewPartitions(partitions: Seq[TopicPartition], groupReset: Option[String]): Unit = {
    if (partitions.isEmpty) return
    val reset = groupReset.getOrElse(DefaultAutoOffsetReset).toLowerCase(Locale.ROOT)
    val spec = reset match {
      case "earliest" => OffsetSpec.earliest()
      case "latest" => OffsetSpec.latest()
      case _ => return
    }
    try {
      val starts = lookups.offsets(partitions.toSet, spec)
      if (starts.isEmpty) return // their topics are gone
      await(
        s"starting share group '$group' at $reset",
        admin.alterShareGroupOffsets(group, starts.map { case (tp, o) => tp -> java.lang.Long.valueOf(o) }.asJava).all()
      )
      logInfo(
        s"Share group '$group' starts ${starts.size} partitions at $reset: ${starts.toSeq.sortBy(_._1.toString).mkString(", ")}"
      )
    } catch {
      case e: ExecutionException => leftToKafka(e.getCause.getMessage)
      // The first such call in a cluster creates Kafka's share-group state topic, which can take
      // longer than a short `kafka.default.api.timeout.ms`; Kafka completes the call regardless.
      // The ACLs the source needs (KAFKA_SHARE_NOT_AUTHORIZED) need not allow this call either.
      case e: KafkaShareRuntimeException if LeftToKafka.contains(e.condition) => leftToKafka(e.getMessage)
    }
  }

  private val LeftToKafka = Set(KafkaShareErrors.BrokerUnreachable, KafkaShareErrors.NotAuthorized)

  private def leftToKafka(reason: String): Unit =
    logInfo(
      s"Kafka initializes share group '$group' when its consumers join (the start offsets were not set now: $reason)"
    )
}
