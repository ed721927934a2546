package io.github.sparkkafkashare.metrics

import java.util.concurrent.TimeUnit

import scala.collection.mutable

import org.apache.spark.sql.connector.metric.{CustomMetric, CustomSumMetric, CustomTaskMetric}
import org.apache.spark.util.LongAccumulator

/**
 * A value that each task reports and the Spark UI's SQL tab sums per micro-batch on the scan node.
 * Spark builds these on the driver by reflection, so each is a public class with a no-arg constructor.
 */
abstract class KafkaShareTaskMetric(override val name: String, override val description: String)
  extends CustomSumMetric {

  /** What StreamingQueryProgress shows for the run's `sum`. */
  def reported(sum: Long): Long = sum
}

/**
 * Time a task spent in one part of the source's work, summed over the batch's tasks: kept in
 * nanoseconds (most single calls take less than a millisecond), shown in milliseconds.
 */
abstract class KafkaShareTimeMetric(name: String, description: String) extends KafkaShareTaskMetric(name, description) {
  override def reported(sum: Long): Long = TimeUnit.NANOSECONDS.toMillis(sum)

  override def aggregateTaskMetrics(taskMetrics: Array[Long]): String = reported(taskMetrics.sum).toString
}

class RecordsAcquiredMetric extends KafkaShareTaskMetric("recordsAcquired", "records acquired")
class RecordsRedeliveredMetric
  extends KafkaShareTaskMetric("recordsRedelivered", "records acquired again (deliveryCount > 1)")
class RecordsAcceptedMetric extends KafkaShareTaskMetric("recordsAccepted", "records accepted (as the broker answered)")
class RecordsReleasedMetric extends KafkaShareTaskMetric("recordsReleased", "records released (as the broker answered)")
class RecordsRejectedMetric extends KafkaShareTaskMetric("recordsRejected", "records rejected (as the broker answered)")
class LockRenewalsMetric extends KafkaShareTaskMetric("lockRenewals", "record locks renewed")
class LocksExpiredMetric extends KafkaShareTaskMetric("locksExpired", "record locks expired before acknowledgement")
class AcknowledgementsFailedMetric
  extends KafkaShareTaskMetric("acknowledgementsFailed", "acknowledgements not applied (lock not expired)")
class RecordsDeduplicatedMetric
  extends KafkaShareTaskMetric("recordsDeduplicated", "redelivered records dropped as duplicates")
class RecordsReplayedMetric extends KafkaShareTaskMetric("recordsReplayed", "logged records read back by coordinates")
class ConsumersJoinedMetric extends KafkaShareTaskMetric("consumersJoined", "share consumers that joined the group")
class PollTimeMetric extends KafkaShareTimeMetric("pollMs", "time polling the share consumers (ms)")
class AcknowledgeTimeMetric
  extends KafkaShareTimeMetric("acknowledgeMs", "time sending acknowledgements and waiting for their answers (ms)")
class RecordsLogTimeMetric
  extends KafkaShareTimeMetric("recordsLogMs", "time logging and checking records in the checkpoint's records log (ms)")

private[sparkkafkashare] object KafkaShareTaskMetric {
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
  val PollTime = new PollTimeMetric
  val AcknowledgeTime = new AcknowledgeTimeMetric
  val RecordsLogTime = new RecordsLogTimeMetric

  /** Counts summed by metric. */
  def sum(counts: Iterable[(KafkaShareTaskMetric, Long)]): Map[KafkaShareTaskMetric, Long] =
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
    Joined,
    PollTime,
    AcknowledgeTime,
    RecordsLogTime
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

  /** Runs `body`, adding the time it takes to `timer`. */
  def timed[T](timer: KafkaShareSourceMetrics => LongAccumulator)(body: => T): T = {
    val start = System.nanoTime()
    try body
    finally add(timer, System.nanoTime() - start)
  }

  def addAll(byMetric: Map[KafkaShareTaskMetric, Long]): Unit =
    metrics.counters.foreach { case (metric, accumulator) =>
      byMetric.get(metric).foreach(n => add(_ => accumulator, n))
    }

  /** The task's counts so far, by metric. */
  def byMetric: Map[KafkaShareTaskMetric, Long] = metrics.counters.map { case (metric, accumulator) =>
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
