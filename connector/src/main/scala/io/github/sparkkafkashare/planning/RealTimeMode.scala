package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.{AcceptPoint, AcknowledgmentMode, KafkaShareSourceOptions}
import io.github.sparkkafkashare.options
  .KafkaShareSourceOptions.{AcknowledgeOption, AcknowledgmentModeOption, ExactlyOnceStrategyOption, MaxRecordsPerTrigger}

/**
 * What real-time mode (Spark 4.1 and later, a real-time trigger) takes of a query's options. A
 * real-time batch lasts minutes, so a task acknowledges its records itself, as the query processes
 * them ([[AcceptPoint.AfterRow]]) or as the task ends ([[AcceptPoint.AfterTask]]); options whose
 * guarantee rests on a batch's commit are refused as the query starts.
 */
private[planning] object RealTimeMode {

  /** The sink Spark allows in real-time mode that hands each row to its writer as it gets it (`foreach`). */
  private val ForeachSink = "org.apache.spark.sql.execution.streaming.sources.ForeachWriterTable"

  /**
   * What writes at its commit: Spark's `kafka` sink (its producer flushes then), `console` and
   * `memory` (their rows go to the driver then), and a Python `foreach` writer (its rows queue for
   * the Python worker, which the task waits for as it ends).
   */
  private val CommittingSinks = Set(
    "org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable",
    "org.apache.spark.sql.execution.streaming.ConsoleTable$",
    "org.apache.spark.sql.execution.streaming.sources.ContinuousMemorySink",
    "org.apache.spark.sql.execution.python.streaming.PythonForeachWriter"
  )

  /** Throws for an option real-time mode cannot keep, whatever the sink. */
  def refuseOptions(options: KafkaShareSourceOptions): Unit = {
    val strategy = options.exactlyOnceStrategy
    if (strategy.logsRecords) {
      throw KafkaShareErrors.realTimeUnsupported(
        ExactlyOnceStrategyOption,
        strategy.name,
        "a real-time task ACCEPTs records as the query processes them, and logs none to re-run a batch from",
        "Use strategy 'none' or 'idempotent' (with a sink keyed by the record coordinates), or a micro-batch trigger."
      )
    }
    if (options.acknowledgmentMode == AcknowledgmentMode.Explicit) {
      throw KafkaShareErrors.realTimeUnsupported(
        AcknowledgmentModeOption,
        AcknowledgmentMode.Explicit.name,
        "user code acknowledges records from foreachBatch, which real-time mode does not run",
        s"Use '${AcknowledgmentMode.Implicit.name}', or a micro-batch trigger."
      )
    }
    options.maxRecordsPerTrigger.foreach { max =>
      throw KafkaShareErrors.realTimeUnsupported(
        MaxRecordsPerTrigger,
        max.toString,
        "a real-time batch reads records as they arrive until its end",
        "Remove it, or use a micro-batch trigger."
      )
    }
    options.acknowledge.filterNot(_.realTime).foreach { p =>
      throw KafkaShareErrors.realTimeUnsupported(
        AcknowledgeOption,
        p.name,
        "a real-time batch lasts minutes, longer than its records' locks, and the group's lock limit would stall it",
        s"Use '${AcceptPoint.AfterRow.name}' (a foreach sink) or '${AcceptPoint.AfterTask.name}' (a sink that " +
          "writes at its commit), or leave the option unset to choose by the sink."
      )
    }
  }

  /**
   * The accept point of a real-time query whose sink is of `sinkClasses` (its table's, and its
   * writer's: [[org.apache.spark.sql.kafkashare.RunningStreamingQuery.sinkClassNames]]): the option's,
   * or the one the sink needs. Throws for an option real-time mode cannot keep.
   */
  def acceptPoint(options: KafkaShareSourceOptions, sinkClasses: Seq[String]): AcceptPoint = {
    refuseOptions(options)
    val commitsRows = sinkClasses.find(CommittingSinks)
    val rowAtATime = sinkClasses.contains(ForeachSink) && commitsRows.isEmpty
    options.acknowledge match {
      case Some(AcceptPoint.AfterRow) if commitsRows.nonEmpty =>
        throw KafkaShareErrors.realTimeUnsupported(
          AcknowledgeOption,
          AcceptPoint.AfterRow.name,
          s"the query's sink (${commitsRows.get}) writes its rows at its commit, after the task has processed them",
          s"Use '${AcceptPoint.AfterTask.name}', or leave the option unset."
        )
      case Some(p) => p
      case None => if (rowAtATime) AcceptPoint.AfterRow else AcceptPoint.AfterTask
    }
  }
}
