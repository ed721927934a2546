package io.github.sparkkafkashare.metrics

import scala.collection.mutable

import org.apache.spark.sql.connector.metric.{CustomMetric, CustomSumMetric, CustomTaskMetric}
import org.apache.spark.util.LongAccumulator

/**
 * A count that each task reports and the Spark UI's SQL tab sums per micro-batch on the scan node.
 * Spark builds these on the driver by reflection, so each is a public class with a no-arg constructor.
 */
abstract class KafkaShareCountMetric(override val name: String, override val description: String)
  extends CustomSumMetric

class RecordsAcquiredMetric extends KafkaShareCountMetric("recordsAcquired", "records acquired")
class RecordsRedeliveredMetric
  extends KafkaShareCountMetric("recordsRedelivered", "records acquired again (deliveryCount > 1)")
class RecordsAcceptedMetric extends KafkaShareCountMetric("recordsAccepted", "records accepted")
class RecordsReleasedMetric extends KafkaShareCountMetric("recordsReleased", "records released")
class RecordsRejectedMetric extends KafkaShareCountMetric("recordsRejected", "records rejected")
class LockRenewalsMetric extends KafkaShareCountMetric("lockRenewals", "record locks renewed")
class LocksExpiredMetric extends KafkaShareCountMetric("locksExpired", "record locks expired before acknowledgement")
class AcknowledgementsFailedMetric
  extends KafkaShareCountMetric("acknowledgementsFailed", "acknowledgements not applied (lock not expired)")
class RecordsDeduplicatedMetric
  extends KafkaShareCountMetric("recordsDeduplicated", "redelivered records dropped as duplicates")
class RecordsReplayedMetric extends KafkaShareCountMetric("recordsReplayed", "logged records read back by coordinates")
class ConsumersJoinedMetric extends KafkaShareCountMetric("consumersJoined", "share consumers that joined the group")

private[sparkkafkashare] object KafkaShareCountMetric {
  val Acquired = new RecordsAcquiredMetric
  val Redelivered = new RecordsRedeliveredMetric
  val Accepted = new RecordsAcceptedMetric
  val Released = new RecordsReleasedMetric
  val Rejected = new RecordsRejectedMetric
  val LockRenewals = new LockRenewalsMetric
  val LocksExpired = new LocksExpiredMetric
  val AcknowledgementsFailed = new AcknowledgementsFailedMetric
  val Deduplicated = new RecordsDeduplicatedMetric
  val Replayed = new RecordsReplayedMetric
  val Joined = new ConsumersJoinedMetric

  /** Counts summed by metric. */
  def sum(counts: Iterable[(KafkaShareCountMetric, Long)]): Map[KafkaShareCountMetric, Long] =
    counts.groupBy(_._1).map { case (metric, each) => metric -> each.map(_._2).sum }

  /** What the scan reports as its supported custom metrics. */
  val all: Array[CustomMetric] = Array(
    Acquired,
    Redelivered,
    Accepted,
    Released,
    Rejected,
    LockRenewals,
    LocksExpired,
    AcknowledgementsFailed,
    Deduplicated,
    Replayed,
    Joined
  )
}

/**
 * What one task adds to the source's counters: to the query-wide accumulators behind the source
 * metrics in StreamingQueryProgress, and to the task's own custom metrics.
 */
private[sparkkafkashare] final class TaskCounts(metrics: KafkaShareSourceMetrics) {

  /** This task's part of each counter, by accumulator id. */
  private val counted = mutable.Map.empty[Long, Long]

  def add(counter: KafkaShareSourceMetrics => LongAccumulator, n: Long): Unit = {
    val accumulator = counter(metrics)
    accumulator.add(n)
    counted(accumulator.id) = counted.getOrElse(accumulator.id, 0L) + n
  }

  def addAll(byMetric: Map[KafkaShareCountMetric, Long]): Unit =
    metrics.counters.foreach { case (metric, accumulator) =>
      byMetric.get(metric).foreach(n => add(_ => accumulator, n))
    }

  /** The task's counts so far, by metric. */
  def byMetric: Map[KafkaShareCountMetric, Long] = metrics.counters.map { case (metric, accumulator) =>
    metric -> counted.getOrElse(accumulator.id, 0L)
  }.toMap

  /** The task's values so far, as PartitionReader.currentMetricsValues reports them. */
  def values: Array[CustomTaskMetric] = metrics.counters.map { case (metric, accumulator) =>
    val sum = counted.getOrElse(accumulator.id, 0L)
    new CustomTaskMetric {
      override def name(): String = metric.name
      override def value(): Long = sum
    }: CustomTaskMetric
  }.toArray
}
