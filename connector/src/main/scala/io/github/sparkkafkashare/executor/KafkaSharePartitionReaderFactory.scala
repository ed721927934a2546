package io.github.sparkkafkashare.executor

import io.github.sparkkafkashare.acknowledgements.{LoggedRecord, RoundRecordsLog}
import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, TaskCounts}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}

/**
 * Carries the driver's accumulators to the tasks. They must travel here, in the task binary, and
 * not in the input partitions: Spark deserializes partitions before the task context exists, and
 * an accumulator deserialized then never reports back.
 *
 * @param recordsLog set for the `checkpoint-dedup` and `two-phase-commit` strategies
 */
private[sparkkafkashare] final case class KafkaSharePartitionReaderFactory(
    metrics: KafkaShareSourceMetrics,
    slotLocations: SlotLocations,
    recordsLog: Option[RoundRecordsLog])
  extends PartitionReaderFactory {

  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = partition match {
    case p: KafkaShareInputPartition =>
      loggedElsewhere(p) match {
        case Some(logged) =>
          new KafkaShareReplayReader(p.round, p.slot, logged, p.consumerConfig, p.includeHeaders, new TaskCounts(metrics))
        case None => new KafkaSharePartitionReader(p, metrics, slotLocations, recordsLog)
      }
    case p: KafkaShareReplayPartition =>
      new KafkaShareReplayReader(p.round, p.slot, p.records, p.consumerConfig, p.includeHeaders, new TaskCounts(metrics))
  }

  /**
   * With a records log: the records of a slot's round that an earlier evaluation logged (a retried
   * task, or foreachBatch reading the batch again) when the consumer that acquired them is not in
   * this JVM (its executor died, or Spark ran this task elsewhere). They are read back by their
   * coordinates, so every evaluation of a batch holds the same records. The consumer that holds them
   * settles them when its slot next runs there; if it died, they come back once their locks expire
   * and are dropped as duplicates. Records that a slot which logged the round first names too are
   * that slot's to hand over.
   */
  private def loggedElsewhere(p: KafkaShareInputPartition): Option[Seq[LoggedRecord]] =
    recordsLog.filter(_ => p.poll && !ShareConsumerPool.holdsRound(SlotKey(p.runId, p.slot), p.round)).flatMap { log =>
      log.read(p.round, p.slot).map { logged =>
        val others = KafkaSharePartitionReader.loggedFirstElsewhere(log, p, logged)
        logged.filterNot(r => others.contains(r.coordinates))
      }
    }
}
