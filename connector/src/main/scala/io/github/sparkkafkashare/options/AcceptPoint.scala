package io.github.sparkkafkashare.options

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.KafkaShareSourceOptions.{AcknowledgeOption, AcknowledgmentModeOption, ExactlyOnceStrategyOption}

/**
 * When a batch's records are ACCEPTed to the share group (`kafka.share.acknowledge`); see
 * docs/delivery-guarantees.md.
 *
 * A record stays locked until it is ACCEPTed, and the group locks at most its lock limit per
 * partition, so the point of acceptance bounds how many records a batch can hold.
 *
 * @param realTime whether it is real-time mode's (Spark 4.1 and later, a real-time trigger), where a
 *                 batch lasts minutes and its records cannot wait for its commit
 */
private[sparkkafkashare] sealed abstract class AcceptPoint(val name: String, val realTime: Boolean) {

  /** Fails at `load()` where this point cannot keep its guarantee. */
  def refuseWith(strategy: ExactlyOnceStrategy, mode: AcknowledgmentMode): Unit = if (realTime) {
    if (strategy.logsRecords) {
      throw KafkaShareErrors.conflictingOptions(
        Seq(AcknowledgeOption, ExactlyOnceStrategyOption),
        s"'$name' is for real-time mode, which logs no records: set $ExactlyOnceStrategyOption to " +
          s"'${ExactlyOnceStrategy.None.name}' or '${ExactlyOnceStrategy.Idempotent.name}'."
      )
    }
    if (mode == AcknowledgmentMode.Explicit) {
      throw KafkaShareErrors.conflictingOptions(
        Seq(AcknowledgeOption, AcknowledgmentModeOption),
        s"'$name' is for real-time mode, where records are ACCEPTed as the query processes them: set " +
          s"$AcknowledgmentModeOption to '${AcknowledgmentMode.Implicit.name}'."
      )
    }
  }
}

private[sparkkafkashare] object AcceptPoint {

  /** Once Spark commits the batch: the group redelivers the records of a batch that never commits. */
  case object AfterCommit extends AcceptPoint("after-commit", realTime = false)

  /**
   * Once the task has logged the records in the checkpoint: a batch that never commits reads them
   * back from there (`two-phase-commit`), so the group need not keep them. A slot then polls
   * several times a round, each poll's records logged and ACCEPTed before the next.
   */
  case object AfterLog extends AcceptPoint("after-log", realTime = false) {
    override def refuseWith(strategy: ExactlyOnceStrategy, mode: AcknowledgmentMode): Unit = {
      if (!strategy.replaysLoggedRecords) {
        throw KafkaShareErrors.conflictingOptions(
          Seq(AcknowledgeOption, ExactlyOnceStrategyOption),
          s"'$name' gives records back to the group before their batch commits, so only a strategy that re-runs " +
            s"a batch from the records it logged can keep them: set $ExactlyOnceStrategyOption to " +
            s"'${ExactlyOnceStrategy.TwoPhaseCommit.name}', or $AcknowledgeOption to '${AfterCommit.name}'."
        )
      }
      if (mode == AcknowledgmentMode.Explicit) {
        throw KafkaShareErrors.conflictingOptions(
          Seq(AcknowledgeOption, AcknowledgmentModeOption),
          s"In explicit mode user code decides each record's acknowledgement after reading its batch, and '$name' " +
            s"ACCEPTs records before that: set $AcknowledgeOption to '${AfterCommit.name}', or " +
            s"$AcknowledgmentModeOption to '${AcknowledgmentMode.Implicit.name}'."
        )
      }
    }
  }

  /**
   * Real-time mode: once the query has processed a poll's rows, which the task knows when it is asked
   * for the row after the poll's last. For a sink that writes each row as it gets it (a `ForeachWriter`).
   */
  case object AfterRow extends AcceptPoint("after-row", realTime = true)

  /**
   * Real-time mode: once the task ends, after the sink committed what it wrote. For a sink that writes
   * at its commit (Spark's `kafka` sink, `console`, `memory`). A consumer then polls once a batch: Kafka
   * takes no next poll before the last one's records are acknowledged.
   */
  case object AfterTask extends AcceptPoint("after-task", realTime = true)

  val all: Seq[AcceptPoint] = Seq(AfterCommit, AfterLog, AfterRow, AfterTask)
}
