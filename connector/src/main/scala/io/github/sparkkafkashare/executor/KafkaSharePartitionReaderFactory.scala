package io.github.sparkkafkashare.executor

import io.github.sparkkafkashare.acknowledgements.RoundRecordsLog
import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, TaskCounts}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}

/**
 * Carries the driver's accumulators to the tasks. They must travel here, in the task binary, and
 * not in the input partitions: Spark deserializes partitions before the task context exists, and
 * an accumulator deserialized then never reports back.
 *
 * @param recordsLog set for the `checkpoint-dedup` and `two-phase-commit` strategies
 * @param afterLog   `kafka.share.acknowledge=after-log`
 */
private[sparkkafkashare] final case class KafkaSharePartitionReaderFactory(
    metrics: KafkaShareSourceMetrics,
    slotLocations: SlotLocations,
    recordsLog: Option[RoundRecordsLog],
    afterLog: Boolean
) extends PartitionReaderFactory {

  @transient private lazy val path = ExactlyOncePath(recordsLog, afterLog)

  /**
   * A slot's round is read from its consumer, unless the consumer that acquired it is not in this
   * JVM (its executor died, or Spark ran the task elsewhere) and the strategy knows what an earlier
   * evaluation handed out: then those records are read back by their coordinates, so every evaluation
   * of a batch holds the same records. The consumer that holds them settles them when its slot next
   * runs there; if it died, they come back once their locks expire and are dropped as duplicates.
   */
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = partition match {
    case p: KafkaShareInputPartition =>
      val elsewhere =
        if (p.poll && !ShareConsumerPool.holdsRound(SlotKey(p.runId, p.slot), p.round)) path.readElsewhere(p) else None
      elsewhere match {
        case Some(logged) =>
          new KafkaShareReplayReader(
            p.round,
            p.slot,
            logged,
            p.consumerConfig,
            p.includeHeaders,
            new TaskCounts(metrics)
          )
        case None => new KafkaSharePartitionReader(p, metrics, slotLocations, path)
      }
    case p: KafkaShareReplayPartition =>
      new KafkaShareReplayReader(
        p.round,
        p.slot,
        p.records,
        p.consumerConfig,
        p.includeHeaders,
        new TaskCounts(metrics)
      )
  }
}
