package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.planning.Backlog.PartitionAtRoundStart
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.connector.read.InputPartition

/**
 * A planned round, with the acquired-records and joined-consumers counters before it ran (what it
 * acquired and who joined in it is [[RoundCounts]]'s to tell) and what [[Backlog]] noted as it began.
 */
private[planning] final case class PlannedRound(
    round: Long,
    acquiredBefore: Long,
    joinedBefore: Long,
    roundStart: Map[TopicPartition, PartitionAtRoundStart],
    partitions: Array[InputPartition]
)
