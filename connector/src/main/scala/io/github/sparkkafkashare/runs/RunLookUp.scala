package io.github.sparkkafkashare.runs

/** What an executor heard when it asked the driver about a query run (`QueryRunRegistry.lookUp`). */
sealed trait RunLookUp

object RunLookUp {
  final case class Running(state: RunState) extends RunLookUp

  /**
   * The run stopped, and its closing job has run: a consumer of it still open was missed by that job,
   * and is to be settled as the job would have, by the run's last state and the marks of its last
   * committed round.
   */
  final case class Stopped(last: RunState, marks: RoundMarks) extends RunLookUp

  /**
   * The driver does not know the run: another copy of the connector, in a class loader of its own,
   * answered, or the run stopped longer ago than the driver remembers (`QueryRunRegistry.StoppedRunsKept`).
   */
  case object Unknown extends RunLookUp

  /** The driver did not answer in time: the run may well still be running. */
  case object Unanswered extends RunLookUp
}
