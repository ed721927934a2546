package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import scala.util.control.NonFatal

import io.github.sparkkafkashare.acknowledgements.AcknowledgementMarks
import io.github.sparkkafkashare.executor.ShareConsumerPool
import org.apache.spark.internal.Logging
import org.apache.spark.sql.kafkashare.ExecutorLocality
import org.apache.spark.sql.SparkSession

/**
 * Closes a stopped query run's share consumers wherever they live: in this JVM directly (local
 * mode), and on executors through small jobs with one task preferring each live executor. The first
 * job has every consumer stop fetching ([[ShareConsumerPool.stopFetching]]), so that none acquires
 * what another one releases as it closes; the second closes them. A consumer this misses (its
 * executor was busy or gone) is closed by the pool's janitor.
 */
private[sparkkafkashare] object ConsumerCloser extends Logging {
  private val CloseJobTimeoutMs = TimeUnit.SECONDS.toMillis(60)

  /** Not as long: an executor busy with another job must not hold back the others' closing. */
  private val StopFetchingJobTimeoutMs = TimeUnit.SECONDS.toMillis(10)

  def closeRun(
      session: SparkSession,
      runId: String,
      slotHomes: Map[Int, String],
      committedThrough: Long,
      marks: AcknowledgementMarks
  ): Unit = {
    val here = ExecutorLocality.currentExecutor()
    // Every live executor: a slot's tasks may have left a consumer behind on one that no slot calls home.
    val executors = ExecutorLocality.sortedExecutors().filterNot(_ == here)
    val onExecutors = executors.nonEmpty && !session.sparkContext.isStopped
    ShareConsumerPool.stopFetching(runId)
    if (onExecutors) {
      runOnExecutors(session, runId, executors, "stop share consumers fetching", StopFetchingJobTimeoutMs) { _ =>
        ShareConsumerPool.stopFetching(runId)
      }
    }
    ShareConsumerPool.closeRun(runId, committedThrough, marks, slotHomes, here)
    if (onExecutors) {
      runOnExecutors(session, runId, executors, "close share consumers", CloseJobTimeoutMs) { executor =>
        ShareConsumerPool.closeRun(runId, committedThrough, marks, slotHomes, executor)
      }
    }
  }

  /** Runs `action` with the executor's name in one task on each of `executors`; waits at most `timeoutMs`. */
  private def runOnExecutors(
      session: SparkSession,
      runId: String,
      executors: Seq[String],
      what: String,
      timeoutMs: Long
  )(action: String => Unit): Unit = {
    val sc = session.sparkContext
    // A thread of its own: stop() may run on an interrupted stream thread whose job group the query is cancelling.
    val job = new Thread(
      () => {
        try {
          sc.clearJobTags()
          sc.setJobGroup(s"kafka-share-close-$runId", s"kafka-share: $what", interruptOnCancel = false)
          sc.makeRDD(executors.map(e => (e, Seq(e)))).foreach(_ => action(ExecutorLocality.currentExecutor()))
        } catch {
          case NonFatal(e) => logWarning(s"Could not $what on executors; idle ones close by themselves", e)
        }
      },
      s"kafka-share-close-$runId"
    )
    job.setDaemon(true)
    job.start()
    val interrupted = Thread.interrupted()
    try job.join(timeoutMs)
    finally if (interrupted) Thread.currentThread().interrupt()
  }
}
