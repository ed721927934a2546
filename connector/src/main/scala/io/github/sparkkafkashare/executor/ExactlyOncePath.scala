package io.github.sparkkafkashare.executor

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{LoggedRecord, RoundRecordsLog}
import io.github.sparkkafkashare.metrics.TaskCounts
import org.apache.kafka.clients.consumer.ConsumerRecord
import org.apache.spark.sql.catalyst.InternalRow

/**
 * What an exactly-once strategy does with a slot's round on the executor. The reader calls it at
 * the same points whatever the strategy: a round the slot just polled, a round it still holds when
 * Spark evaluates the batch again, and, before a reader is made, a round to read where its consumer
 * is not. `none` and `idempotent` hand out the records as polled ([[ExactlyOncePath.AsPolled]]);
 * `checkpoint-dedup` and `two-phase-commit` log them first ([[RecordsLogPath]]), and `after-log`
 * ACCEPTs them once logged ([[AfterLogPath]]); what else tells those two strategies apart happens
 * on the driver, when a batch runs again after a restart.
 */
private[executor] trait ExactlyOncePath {

  /** The rows of the round the slot just polled. */
  def polled(round: SlotRound, records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Iterator[InternalRow]

  /** The rows of a round the slot still holds: Spark evaluates the batch again (a retry, or a second action). */
  def heldAgain(round: SlotRound, held: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Iterator[InternalRow]

  /**
   * For a slot's round to read in a JVM whose consumer does not hold it (its executor died, or Spark
   * ran the task elsewhere): the records an earlier evaluation handed out, to read back by their
   * coordinates, if the strategy knows them.
   */
  def readElsewhere(partition: KafkaShareInputPartition): Option[Seq[LoggedRecord]]
}

private[executor] object ExactlyOncePath {

  /** @param afterLog `kafka.share.acknowledge=after-log` */
  def apply(recordsLog: Option[RoundRecordsLog], afterLog: Boolean): ExactlyOncePath =
    recordsLog.fold[ExactlyOncePath](AsPolled)(log => if (afterLog) new AfterLogPath(log) else new RecordsLogPath(log))

  /** `none`, `idempotent`: the records as polled, and, evaluated again, as held. */
  object AsPolled extends ExactlyOncePath {
    override def polled(
        round: SlotRound,
        records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
    ): Iterator[InternalRow] =
      round.rows(records)
    override def heldAgain(
        round: SlotRound,
        held: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
    ): Iterator[InternalRow] =
      round.rows(held)
    override def readElsewhere(partition: KafkaShareInputPartition): Option[Seq[LoggedRecord]] =
      None
  }
}

/** A slot's round in a task: the input partition, the slot's consumer, and the task's counts. */
private[executor] final class SlotRound(
    val partition: KafkaShareInputPartition,
    val slot: ShareConsumerSlot,
    val counts: TaskCounts
) {
  def rows(records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Iterator[InternalRow] =
    records.iterator().asScala.map(r =>
      KafkaShareRows.toRow(r, partition.includeHeaders, KafkaShareRows.deliveryCount(r))
    )

  /** Runs `body`, a use of the checkpoint's records log, timing it as the task's records-log time. */
  def inRecordsLog[T](body: => T): T = counts.timed(_.recordsLogNanos)(body)

  /**
   * Runs `body`, which sends acknowledgements and waits for their answers, timing it, and counts what
   * the broker answered (what it did not answer in time, the slot's next task counts).
   */
  def acknowledging[T](body: => T): T = {
    val result = counts.timed(_.acknowledgeNanos)(body)
    counts.addAll(slot.drainAcknowledgementEvents().byMetric)
    result
  }

  /** Counts what a poll of the slot acquired, and returns it. */
  def acquired(
      records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = {
    counts.add(_.acquired, records.size)
    counts.add(_.redelivered, records.asScala.count(r => KafkaShareRows.deliveryCount(r) > 1))
    records
  }
}
