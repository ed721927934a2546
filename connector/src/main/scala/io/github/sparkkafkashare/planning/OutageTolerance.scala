package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.spark.internal.Logging

/**
 * Lets a running query ride out a broker restart. The driver asks Kafka for the backlog between
 * batches; while the cluster cannot be reached, such a lookup fails after `kafka.default.api.timeout.ms`.
 * A failed lookup here means "the backlog is unknown", which runs a round whose consumers wait for
 * the cluster, as Spark's kafka source retries its offset lookups. The query waits through
 * `maxFailures` lookups in a row that could not reach the cluster (option `fetchOffset.numRetries`)
 * and fails at the next one.
 */
private[planning] final class OutageTolerance(admin: GroupAdmin, maxFailures: Int, groupId: String) extends Logging {

  /** Lookups in a row that could not reach the cluster. Only the stream execution thread uses this. */
  private var failures = 0

  /** Whether the last lookup could not reach the cluster. */
  def ongoing: Boolean = failures > 0

  /**
   * `lookup`'s answer, or None when the cluster is unreachable and the query can still wait for it.
   * Only a lookup that the cluster answered ends an outage: one that needed no call (topics not yet
   * due for a refresh) says nothing about it.
   */
  def attempt[T](what: String)(lookup: => T): Option[T] =
    try {
      val answeredBefore = admin.callsAnswered
      val answer = lookup
      if (failures > 0 && admin.callsAnswered > answeredBefore) {
        logInfo(s"Share group '$groupId': the Kafka cluster answers again after $failures failed lookups.")
        failures = 0
      }
      Some(answer)
    } catch {
      case e: KafkaShareRuntimeException
          if e.condition == KafkaShareErrors.BrokerUnreachable && failures < maxFailures =>
        failures += 1
        logWarning(s"Share group '$groupId': $what failed because the Kafka cluster is unreachable " +
          s"($failures of ${maxFailures} failed lookups in a row that the query waits through; option " +
          s"'${KafkaShareSourceOptions.FetchOffsetNumRetries}'). The next batch polls meanwhile. ${e.getMessage}")
        None
    }
}
