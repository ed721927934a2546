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
 * mode), and on executors through a small job with one task pinned to each live executor. A
 * consumer this misses (its executor was busy or gone) is closed by the pool's janitor.
 */
private[sparkkafkashare] object ConsumerCloser extends Logging {
  private val JobTimeoutMs = TimeUnit.SECONDS.toMillis(60)

  def closeRun(
      session: SparkSession,
      runId: String,
      slotHomes: Map[Int, String],
      committedThrough: Long,
      marks: AcknowledgementMarks): Unit = {
    val here = ExecutorLocality.currentExecutor()
    ShareConsumerPool.closeRun(runId, committedThrough, marks, slotHomes, here)
    // Every live executor: a slot's tasks may have left a consumer behind on one that no slot calls home.
    val executors = ExecutorLocality.sortedExecutors().filterNot(_ == here)
    if (executors.nonEmpty && !session.sparkContext.isStopped) {
      runCloseJob(session, runId, executors, committedThrough, marks, slotHomes)
    }
  }

  private def runCloseJob(
      session: SparkSession,
      runId: String,
      executors: Seq[String],
      committedThrough: Long,
      marks: AcknowledgementMarks,
      slotHomes: Map[Int, String]): Unit = {
    val sc = session.sparkContext
    // A thread of its own: stop() may run on an interrupted stream thread whose job group the query is cancelling.
    val closer = new Thread(() => {
      try {
        sc.clearJobTags()
        sc.setJobGroup(s"kafka-share-close-$runId", "kafka-share: close share consumers", interruptOnCancel = false)
        sc.makeRDD(executors.map(e => (e, Seq(e)))).foreach { _ =>
          ShareConsumerPool.closeRun(runId, committedThrough, marks, slotHomes, ExecutorLocality.currentExecutor())
        }
      } catch {
        case NonFatal(e) => logWarning("Closing share consumers on executors failed; idle ones close by themselves", e)
      }
    }, s"kafka-share-close-$runId")
    closer.setDaemon(true)
    closer.start()
    val interrupted = Thread.interrupted()
    try closer.join(JobTimeoutMs) finally if (interrupted) Thread.currentThread().interrupt()
  }
}
