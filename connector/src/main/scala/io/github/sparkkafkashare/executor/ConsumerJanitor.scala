package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.TimeUnit
import java.util.concurrent.locks.ReentrantLock

import scala.util.control.NonFatal

import io.github.sparkkafkashare.acknowledgements.AcknowledgementMarks
import io.github.sparkkafkashare.options.KafkaShareSparkConf
import io.github.sparkkafkashare.runs.RunLookUp
import org.apache.spark.SparkEnv
import org.apache.spark.internal.Logging
import org.apache.spark.sql.kafkashare.QueryRunRegistry

/**
 * The pool's janitor: every [[ShareConsumerPool.TidyInterval]] it looks at the consumers no task is
 * using, asks the driver what became of their query runs, and releases or closes the ones no task
 * will settle. It works through the pool's own operations, so a consumer it closes is settled exactly
 * as the run's stop would settle it.
 */
private[executor] object ConsumerJanitor extends Logging {
  import ShareConsumerPool._

  /** Held through each look, so that the JVM's exit waits for the closes it has begun. */
  private val tidying = new ReentrantLock()

  /** Waits up to `wait` for a look under way to end ([[ShareConsumerPool.closeAllAtExit]]). */
  def awaitLook(wait: Duration): Unit =
    if (tidying.tryLock(wait.toNanos, TimeUnit.NANOSECONDS)) tidying.unlock()

  /** Read at each look, as a JVM may run several SparkContexts one after another (tests do). */
  private def configuredIdleTimeout: Duration =
    Option(SparkEnv.get).fold(KafkaShareSparkConf.DefaultConsumerCacheTimeout)(env =>
      KafkaShareSparkConf.consumerCacheTimeout(env.conf)
    )

  /**
   * The janitor, for consumers no task has used for `unusedFor`: asks the driver about their query
   * run ([[QueryRunRegistry]]), once per run. A consumer of a running query whose slot now lives on
   * another executor RELEASEs what it holds of committed rounds and leaves the group, even if no task
   * of the query comes back here: while a member, it keeps partitions assigned to it that no one
   * reads. A consumer unused for `idleTimeout` is closed too, unless what it holds waits for the
   * slot's next task ([[ShareConsumerSlot.awaitsTask]]): a batch may run longer than that (a slow
   * foreachBatch) and its records must stay locked until it commits; the records of a batch that
   * has just committed are the next task's to acknowledge, by the batch's marks, and records taken
   * in ahead are the next task's to hand out. If the driver does not answer, the run may still be
   * running, so a consumer holding a round stays. A consumer of a run that stopped was missed by the
   * run's closing job: it is closed at once, settled as that job would have (by the run's last
   * committed round and its marks, or RELEASEd if its slot had moved), so that it neither stays a
   * member of the group nor keeps records locked, nor gives back records of a committed batch. A
   * consumer of a run the driver does not know (another copy of the connector answered) is closed
   * after the idle timeout, settled by what it last learned was committed.
   */
  private[executor] def tidy(
      here: String,
      unusedFor: Duration = ShareConsumerPool.TidyInterval,
      idleTimeout: Duration = configuredIdleTimeout,
      lookUp: String => RunLookUp = QueryRunRegistry.lookUp
  ): Unit =
    try {
      tidying.lock()
      try tidyUnused(here, unusedFor, idleTimeout, lookUp)
      finally tidying.unlock()
    } catch {
      case NonFatal(e) => logWarning("The share consumer pool's janitor failed; it tries again shortly", e)
    }

  private def tidyUnused(
      here: String,
      unusedFor: Duration,
      idleTimeout: Duration,
      lookUp: String => RunLookUp
  ): Unit = {
    val now = System.nanoTime()
    def unused(slot: ShareConsumerSlot, d: Duration) = !slot.lock.isLocked && now - slot.lastUsedNanos >= d.toNanos
    allSlots.filter { case (_, slot) => unused(slot, unusedFor) }.groupBy(_._1.runId).foreach {
      case (runId, unusedSlots) =>
        val run = lookUp(runId)
        run match {
          case RunLookUp.Running(state) =>
            val counted = releaseLeftBehind(runId, state.homes, here, state.committedThrough)
            if (counted.nonEmpty)
              QueryRunRegistry.reportCountedOutsideTasks(runId, counted.map { case (m, n) => m.name -> n })
          // Those left of a stopped run are all closed below: none may fetch what another releases.
          case RunLookUp.Stopped(_, _) => stopFetching(unusedSlots.map(_._2), ShareConsumerPool.InUseWait)
          case _ =>
        }
        unusedSlots.foreach { case (key, slot) =>
          val movedTo = run match {
            case RunLookUp.Running(state) => state.homes.get(key.slot).filter(_ != here)
            case _ => None
          }
          val closing = run match {
            case RunLookUp.Running(state) =>
              !slot.awaitsTask(state.committedThrough) && (movedTo.isDefined || unused(slot, idleTimeout))
            case RunLookUp.Unanswered => !slot.awaitsTask(committedThrough = -1L) && unused(slot, idleTimeout)
            case RunLookUp.Stopped(_, _) => true
            case RunLookUp.Unknown => unused(slot, idleTimeout)
          }
          // Held while closing, so no task borrows it meanwhile; one that did since `now` kept it in use.
          if (closing && slot.lock.tryLock())
            try {
              if (now - slot.lastUsedNanos >= unusedFor.toNanos) {
                val why = (run, movedTo) match {
                  case (_, Some(executor)) => s"the slot now runs on executor $executor"
                  case (RunLookUp.Stopped(_, _), _) => "the query run stopped"
                  case _ => s"unused for $idleTimeout"
                }
                logInfo(s"Closing the share consumer of slot ${key.slot} of run $runId: $why")
                run match {
                  case RunLookUp.Stopped(last, marks) =>
                    closeAsRunEnds(key, last.committedThrough, AcknowledgementMarks.of(marks), last.homes, here)
                  case _ =>
                    close(
                      key,
                      committedThrough = -1L,
                      AcknowledgementMarks.None
                    ) // settled by what the slot last learned
                }
              }
            } finally slot.lock.unlock()
        }
        // As closeRun does, once the janitor has closed an ended run's last consumer here.
        val ended = run match { case RunLookUp.Stopped(_, _) | RunLookUp.Unknown => true; case _ => false }
        if (ended && slotsOf(runId).isEmpty) forgetRun(runId)
    }
  }
}
