package io.github.sparkkafkashare.planning

import scala.util.control.NonFatal

import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.spark.internal.Logging

/**
 * Follows what operators change on the share group while a query runs (with `kafka-configs`, say):
 * its limits (lock renewal allowed, lock limit per partition, lock duration), read again every
 * [[Backlog.PartitionsRefreshNanos]], and the consumers' settings, worked out again when the
 * subscribed topics have another number of partitions (a topic grew, or a pattern matched one more)
 * or the lock limit changed: poll sizes follow the partitions each consumer has, or shares, and their
 * locks. A slot's next task that polls replaces its consumer when the settings differ, so this
 * changes nothing unless the poll sizes do.
 *
 * Created once a run: it checks that the cluster has share groups and sets the group configs the
 * options ask for, so both fail at the query's start.
 */
private[planning] final class GroupFollower(
    admin: GroupAdmin,
    options: KafkaShareSourceOptions,
    parallelism: Int,
    runId: String,
    clock: NanoClock = NanoClock.System
) extends Logging {

  /**
   * The group's limits as this run last read them, and when it read them: the slots take lock
   * renewal and the lock duration from each round.
   */
  private var limitsRead: LimitsRead = _

  /** The consumers' settings, and what they were worked out for. */
  private var settings: ConsumerSettingsFor = _

  locally {
    val checkedAt = clock.nanoTime()
    admin.checkShareGroupsEnabled(options.brokerDeadLetters.isDefined)
    val subscribed = admin.partitionsOf(admin.subscribedTopics(options.subscription))
    val limits = admin.configureGroup(options, subscribed)
    limitsRead = LimitsRead(limits, checkedAt)
    val basis = PollSizeBasis(subscribed.size, limits.recordLocksPerPartition)
    settings = ConsumerSettingsFor(basis, consumerSettings(basis))
    if (!limits.renewAllowed) warnRenewalRefused()
  }

  def groupLimits: GroupLimits = limitsRead.limits

  /** The settings of this run's share consumers: their poll sizes depend on the partitions and the lock limit. */
  def consumerConfig: Map[String, String] = settings.config

  /**
   * Reads the group's limits again if they are due, unless the cluster is unreachable (`outageOngoing`:
   * the last limits serve, and the failed lookup is not counted), and works out the consumers'
   * settings again if the subscribed topics, as the backlog last described them, have `partitions`.
   */
  def follow(partitions: Option[Int], outageOngoing: Boolean): Unit = {
    val now = clock.nanoTime()
    if (!outageOngoing && now - limitsRead.at >= Backlog.PartitionsRefreshNanos) {
      limitsRead = limitsRead.copy(at = now)
      try followLimits(admin.groupLimits())
      catch {
        case NonFatal(e) =>
          logDebug(s"Reading the configs of share group '${options.groupId}' failed; keeping the last", e)
      }
    }
    val last = settings.basis
    val basis = PollSizeBasis(partitions.getOrElse(last.partitions), groupLimits.recordLocksPerPartition)
    if (basis != last) {
      logInfo(s"Share group '${options.groupId}': the subscribed topics have ${basis.partitions} partitions and " +
        s"${basis.recordLocks} records in flight per partition, where they had ${last.partitions} and " +
        s"${last.recordLocks}.")
      settings = ConsumerSettingsFor(basis, consumerSettings(basis))
    }
  }

  private def followLimits(current: GroupLimits): Unit = {
    val limits = limitsRead.limits
    if (current.renewAllowed != limits.renewAllowed) {
      if (current.renewAllowed)
        logInfo(s"Share group '${options.groupId}' now allows lock renewal: the slots renew from the next round.")
      else warnRenewalRefused()
    }
    if (current.lockDurationMs != limits.lockDurationMs) {
      logInfo(
        s"Share group '${options.groupId}': records are locked for ${current.lockDurationMs} ms, where they were " +
          s"for ${limits.lockDurationMs} ms."
      )
    }
    limitsRead = limitsRead.copy(limits = current)
  }

  private def consumerSettings(basis: PollSizeBasis): Map[String, String] = {
    val PollSizeBasis(partitions, recordLocks) = basis
    val settings = ShareConsumerSettings(options, parallelism, runId, partitions, recordLocks)
    val shared = ShareConsumerSettings.sharedPartitionCap(options, parallelism, partitions, recordLocks).isDefined
    val strictly = if (!shared) "."
    else ", strictly: their even share of the lock limit. Set 'kafka.max.poll.records' or " +
      "'kafka.share.acquire.mode' to choose otherwise."
    logInfo(
      s"$parallelism consumers of share group '${options.groupId}' on $partitions partitions " +
        s"($recordLocks records in flight per partition) each poll up to " +
        s"${settings(ConsumerConfig.MAX_POLL_RECORDS_CONFIG)} records per batch$strictly"
    )
    settings
  }

  private def warnRenewalRefused(): Unit =
    logWarning(
      s"Share group '${options.groupId}' does not allow lock renewal (${ShareGroupConfigs.RenewAllowedConfig}" +
        "=false): records of a batch that runs longer than the acquisition lock will be delivered again."
    )
}

/** What the consumers' poll sizes are worked out from: the subscribed partitions and the group's lock limit per partition. */
private final case class PollSizeBasis(partitions: Int, recordLocks: Int)

/** The consumers' settings, worked out for `basis`. */
private final case class ConsumerSettingsFor(basis: PollSizeBasis, config: Map[String, String])

/** The group's limits, as read `at` (or last due to be read then). */
private final case class LimitsRead(limits: GroupLimits, at: Long)
