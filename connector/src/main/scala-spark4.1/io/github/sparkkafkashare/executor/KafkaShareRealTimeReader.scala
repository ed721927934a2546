package io.github.sparkkafkashare.executor

import io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics
import io.github.sparkkafkashare.offsets.KafkaShareRoundEnd
import io.github.sparkkafkashare.options.AcceptPoint
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming.{PartitionOffset, SupportsRealTimeRead}
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus

/**
 * A slot's task in real-time mode, as Spark 4.1 and later read it ([[RealTimeRound]] does the work).
 * Spark 4.1 calls `nextWithTimeout(timeoutMs)`, 4.2.0 `nextWithTimeout(startTimeMs, timeoutMs)`, later
 * lines either: both are here, each overriding the method that line has.
 */
private[sparkkafkashare] final class KafkaShareRealTimeReader(round: RealTimeRound, roundNumber: Long)
  extends SupportsRealTimeRead[InternalRow] {

  override def nextWithTimeout(timeoutMs: java.lang.Long): RecordStatus =
    status(round.next(System.currentTimeMillis() + timeoutMs))

  override def nextWithTimeout(startTimeMs: java.lang.Long, timeoutMs: java.lang.Long): RecordStatus =
    status(round.next(startTimeMs + timeoutMs))

  override def next(): Boolean =
    throw new UnsupportedOperationException("a real-time reader reads with nextWithTimeout, in real-time mode only")

  override def get(): InternalRow = round.row

  override def getOffset: PartitionOffset = KafkaShareRoundEnd(roundNumber)

  override def currentMetricsValues(): Array[CustomTaskMetric] = round.metricsValues

  /** Spark closes the reader as its rows run out, before the sink commits: the task's completion settles them. */
  override def close(): Unit = ()

  private def status(hasRecord: Boolean): RecordStatus =
    if (hasRecord) RecordStatus.newStatusWithArrivalTimeMs(round.timestampMs)
    else RecordStatus.newStatusWithoutArrivalTime(false)
}

/** Real-time mode's readers, with the driver's accumulators (see [[KafkaSharePartitionReaderFactory]]). */
private[sparkkafkashare] final case class KafkaShareRealTimeReaderFactory(
    metrics: KafkaShareSourceMetrics,
    slotLocations: SlotLocations,
    acceptPoint: AcceptPoint
) extends PartitionReaderFactory {

  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = partition match {
    case p: KafkaShareInputPartition =>
      new KafkaShareRealTimeReader(new RealTimeRound(p, metrics, slotLocations, acceptPoint), p.round)
  }
}
