package io.github.sparkkafkashare.options

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.spark.SparkConf

/**
 * What the source does about records that reach the sink twice, and the rules that follow from it,
 * each written here once; see docs/delivery-guarantees.md.
 *
 * @param logsRecords          each round's records are logged in the checkpoint before any row leaves
 *                             its task, so that a redelivery of a record a committed batch held is
 *                             ACCEPTed and dropped
 * @param replaysLoggedRecords a batch Spark runs again after a restart reads the records the first run
 *                             logged back by their coordinates; otherwise it polls nothing
 */
private[sparkkafkashare] sealed abstract class ExactlyOnceStrategy(
    val name: String,
    val logsRecords: Boolean,
    val replaysLoggedRecords: Boolean
) {

  /**
   * Fails if Spark runs with a setting under which this strategy's guarantee does not hold: one slot's
   * round must be polled by one attempt at a time, and every batch must be in Spark's offset log under
   * the round it ran as. Called where each setting becomes known: the Spark conf at `load()`, the
   * query's own options when its stream starts.
   */
  def refuseConflicting(setting: ConflictingSparkSetting): Unit = if (logsRecords && setting.enabled) {
    throw KafkaShareErrors.conflictingOptions(
      Seq(setting.name, KafkaShareSourceOptions.ExactlyOnceStrategyOption),
      s"Strategy '$name' needs ${setting.needed}: ${setting.fix}, or use strategy 'none' or 'idempotent'."
    )
  }
}

private[sparkkafkashare] object ExactlyOnceStrategy {
  case object None extends ExactlyOnceStrategy("none", logsRecords = false, replaysLoggedRecords = false)

  /**
   * The same as `none` on the source's side: at-least-once, for a sink that writes each record
   * idempotently by its coordinates (topic, partition, offset). The name says what the sink does.
   */
  case object Idempotent extends ExactlyOnceStrategy("idempotent", logsRecords = false, replaysLoggedRecords = false)
  case object CheckpointDedup
    extends ExactlyOnceStrategy("checkpoint-dedup", logsRecords = true, replaysLoggedRecords = false)
  case object TwoPhaseCommit
    extends ExactlyOnceStrategy("two-phase-commit", logsRecords = true, replaysLoggedRecords = true)
  val all: Seq[ExactlyOnceStrategy] = Seq(None, Idempotent, CheckpointDedup, TwoPhaseCommit)
}

/**
 * A Spark setting that the strategies logging records cannot run with.
 *
 * @param needed what the strategy needs, which the setting takes away
 * @param fix    how to turn the setting off, where it is set
 */
private[sparkkafkashare] final case class ConflictingSparkSetting(
    name: String,
    enabled: Boolean,
    needed: String,
    fix: String
)

private[sparkkafkashare] object ConflictingSparkSetting {

  /**
   * Speculative execution runs a second attempt of a slow task beside the first, on another executor,
   * with a consumer of its own: if both poll before either has logged, they log different records for
   * the same round.
   */
  def speculation(conf: SparkConf): ConflictingSparkSetting = ConflictingSparkSetting(
    Speculation,
    conf.getBoolean(Speculation, false),
    "one attempt of a task at a time",
    s"set $Speculation=false for this application (a Spark conf)"
  )

  private val Speculation = "spark.speculation"

  /** With async progress tracking a restart runs batches again under round numbers whose logs it overwrites. */
  def asyncProgressTracking(enabled: Boolean): ConflictingSparkSetting = ConflictingSparkSetting(
    "asyncProgressTrackingEnabled",
    enabled,
    "Spark to log every batch's offsets before it runs",
    "remove the writeStream option asyncProgressTrackingEnabled"
  )
}
