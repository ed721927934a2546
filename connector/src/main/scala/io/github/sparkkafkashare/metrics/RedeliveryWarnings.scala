package io.github.sparkkafkashare.metrics

import org.apache.spark.internal.Logging

/**
 * Tells the query's log, once for each cause, that the group will deliver records of committed
 * batches again: their locks expired, or their acknowledgements were not applied.
 *
 * @param lockTimeoutOption the option that sets how long records stay locked, named in the advice
 */
private[sparkkafkashare] final class RedeliveryWarnings(groupId: String, lockTimeoutOption: String) extends Logging {
  private var warnedOf = Set.empty[KafkaShareTaskMetric]

  /** Warns of each cause `totals` (the run's counts, by metric) shows for the first time. */
  def warnOf(totals: Map[KafkaShareTaskMetric, Long]): Unit = {
    def once(metric: KafkaShareTaskMetric)(what: String, advice: String): Unit =
      if (totals(metric) > 0 && !warnedOf(metric)) {
        warnedOf += metric
        logWarning(s"Share group '$groupId': ${totals(metric)} records $what, so the group will deliver " +
          s"them again (duplicates unless the exactly-once strategy drops them). $advice Metric '${metric.name}' " +
          "counts them.")
      }
    once(KafkaShareTaskMetric.LocksExpired)(
      "lost their acquisition lock before they were acknowledged",
      "Renewal could not keep them: check that the group allows lock renewal (share.renew.acknowledge.enable), " +
        s"raise option '$lockTimeoutOption', or make batches shorter."
    )
    once(KafkaShareTaskMetric.AcknowledgementsFailed)(
      "could not be acknowledged (the acknowledgement was not applied)",
      "Most often their consumer lost the partition as the group's members changed (consumers joining or " +
        "leaving); the executors' logs name the partitions and the error."
    )
  }
}
