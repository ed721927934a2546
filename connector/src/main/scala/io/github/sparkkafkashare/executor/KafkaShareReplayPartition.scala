package io.github.sparkkafkashare.executor

import io.github.sparkkafkashare.acknowledgements.LoggedRecord
import org.apache.spark.sql.connector.read.InputPartition

/**
 * `two-phase-commit`: one slot's part of a batch that a previous run logged but never committed,
 * read back by coordinates so the re-run batch holds exactly the same records.
 */
private[sparkkafkashare] final case class KafkaShareReplayPartition(
    runId: String,
    round: Long,
    slot: Int,
    records: Seq[LoggedRecord],
    consumerConfig: Map[String, String],
    includeHeaders: Boolean
) extends InputPartition {

  override def toString: String = s"KafkaShareReplayPartition(slot=$slot, round=$round, records=${records.size})"
}
