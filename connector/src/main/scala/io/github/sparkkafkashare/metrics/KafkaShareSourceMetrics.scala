package io.github.sparkkafkashare.metrics

import org.apache.spark.SparkContext
import org.apache.spark.util.LongAccumulator

/**
 * Counters that executor tasks add to and the driver reads: which records were acquired, how
 * they were acknowledged, and what happened to their acknowledgements and locks (what happened
 * between tasks is reported by the slot's next task). Accumulators from failed task attempts are
 * dropped by Spark: a failed attempt that polled releases what it acquired, or, where the consumer
 * keeps it for the retry (a records log), the retry counts it.
 */
private[sparkkafkashare] final case class KafkaShareSourceMetrics(
    acquired: LongAccumulator,
    redelivered: LongAccumulator,
    accepted: LongAccumulator,
    released: LongAccumulator,
    rejected: LongAccumulator,
    lockRenewals: LongAccumulator,
    locksExpired: LongAccumulator,
    acknowledgementsFailed: LongAccumulator,
    deduplicated: LongAccumulator,
    replayed: LongAccumulator,
    joined: LongAccumulator,
    pollNanos: LongAccumulator,
    acknowledgeNanos: LongAccumulator,
    recordsLogNanos: LongAccumulator
) {

  /** Each counter with the task metric that shows it per batch; the metric's name is also the counter's in [[report]]. */
  def counters: Seq[(KafkaShareTaskMetric, LongAccumulator)] = {
    import KafkaShareTaskMetric._
    Seq(
      Acquired -> acquired,
      Redelivered -> redelivered,
      Accepted -> accepted,
      Released -> released,
      Rejected -> rejected,
      LockRenewals -> lockRenewals,
      LocksExpired -> locksExpired,
      AcknowledgementsFailed -> acknowledgementsFailed,
      Deduplicated -> deduplicated,
      Replayed -> replayed,
      Joined -> joined,
      PollTime -> pollNanos,
      AcknowledgeTime -> acknowledgeNanos,
      RecordsLogTime -> recordsLogNanos
    )
  }

  /**
   * Records the run took from the group: those acquired, less those it gave back, which the group
   * delivers again and which are counted again when acquired again: RELEASEd (user code's marks, a
   * batch that did not commit, a consumer left behind), or whose acknowledgement the broker did not
   * apply (an expired lock, or a failed acknowledgement). Each acknowledgement counts once, as the
   * broker answered it; one not answered yet counts as kept, until its answer comes.
   *
   * @param countedOutsideTasks as for [[totals]]
   */
  def taken(countedOutsideTasks: Map[String, Long]): Long = {
    import KafkaShareTaskMetric._
    val total = totals(countedOutsideTasks)
    total(Acquired) - total(Released) - total(LocksExpired) - total(AcknowledgementsFailed)
  }

  /** Acknowledgements the broker applied, of every type. */
  def acknowledged: Long = accepted.value + released.value + rejected.value

  /**
   * Each counter's value for the query run.
   *
   * @param countedOutsideTasks what executors' janitors, which run in no task, counted, by metric name
   */
  def totals(countedOutsideTasks: Map[String, Long]): Map[KafkaShareTaskMetric, Long] =
    counters.map { case (metric, accumulator) =>
      metric -> (accumulator.value + countedOutsideTasks.getOrElse(metric.name, 0L))
    }.toMap

  /** The values reported in StreamingQueryProgress.sources[].metrics (all strings, as Spark requires). */
  def report(
      backlog: Option[Long],
      dedupState: Option[Long],
      countedOutsideTasks: Map[String, Long]
  ): Map[String, String] =
    totals(countedOutsideTasks).map { case (metric, n) => metric.name -> metric.reported(n).toString } ++
      backlog.map(b => "backlogRecords" -> b.toString) ++
      dedupState.map(n => "dedupStateRecords" -> n.toString)
}

private[sparkkafkashare] object KafkaShareSourceMetrics {
  def register(sc: SparkContext, groupId: String): KafkaShareSourceMetrics = {
    def counter(name: String) = sc.longAccumulator(s"kafka-share[$groupId].$name")
    KafkaShareSourceMetrics(
      counter("acquired"),
      counter("redelivered"),
      counter("accepted"),
      counter("released"),
      counter("rejected"),
      counter("lockRenewals"),
      counter("locksExpired"),
      counter("acknowledgementsFailed"),
      counter("deduplicated"),
      counter("replayed"),
      counter("consumersJoined"),
      counter("pollNanos"),
      counter("acknowledgeNanos"),
      counter("recordsLogNanos")
    )
  }
}
