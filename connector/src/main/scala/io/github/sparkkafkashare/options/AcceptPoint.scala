package io.github.sparkkafkashare.options

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.KafkaShareSourceOptions.{AcknowledgeOption, AcknowledgmentModeOption, ExactlyOnceStrategyOption}

/**
 * When a batch's records are ACCEPTed to the share group (`kafka.share.acknowledge`); see
 * docs/delivery-guarantees.md.
 *
 * A record stays locked until it is ACCEPTed, and the group locks at most its lock limit per
 * partition, so the point of acceptance bounds how many records a batch can hold.
 */
private[sparkkafkashare] sealed abstract class AcceptPoint(val name: String) {

  /** Fails at `load()` where this point cannot keep its guarantee. */
  def refuseWith(strategy: ExactlyOnceStrategy, mode: AcknowledgmentMode): Unit = ()
}

private[sparkkafkashare] object AcceptPoint {

  /** Once Spark commits the batch: the group redelivers the records of a batch that never commits. */
  case object AfterCommit extends AcceptPoint("after-commit")

  /**
   * Once the task has logged the records in the checkpoint: a batch that never commits reads them
   * back from there (`two-phase-commit`), so the group need not keep them. A slot then polls
   * several times a round, each poll's records logged and ACCEPTed before the next.
   */
  case object AfterLog extends AcceptPoint("after-log") {
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
  val all: Seq[AcceptPoint] = Seq(AfterCommit, AfterLog)
}
