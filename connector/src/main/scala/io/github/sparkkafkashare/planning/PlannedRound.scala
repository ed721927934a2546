package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics
import io.github.sparkkafkashare.planning.Backlog.PartitionAtRoundStart
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.connector.read.InputPartition

/**
 * A planned round, with the acquired-records and joined-consumers counters before it ran and what
 * [[Backlog]] noted as it began.
 */
private[planning] final case class PlannedRound(
    round: Long,
    acquiredBefore: Long,
    joinedBefore: Long,
    roundStart: Map[TopicPartition, PartitionAtRoundStart],
    partitions: Array[InputPartition]
) {

  /** The records this round's tasks have acquired so far. */
  def acquired(counters: KafkaShareSourceMetrics): Long = counters.acquired.value - acquiredBefore

  /** The consumers that joined the group in this round's tasks. */
  def joined(counters: KafkaShareSourceMetrics): Long = counters.joined.value - joinedBefore
}
