package io.github.sparkkafkashare.planning

import java.util.concurrent.{ExecutorService, Executors}
import java.util.concurrent.atomic.AtomicBoolean

import scala.util.control.NonFatal

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import org.apache.spark.internal.Logging

/**
 * The backlog a real-time query's progress reports show, looked up on a thread of its own. Spark
 * asks for a source's metrics between two real-time batches, and new records wait for the next
 * batch's tasks until it has them: a lookup there (an Admin call, at times a second or more) would
 * hold them back. A report shows the last lookup's answer and starts the next one when it is due
 * ([[SubscribedTopics.RefreshNanos]]).
 *
 * @param lookUp the group's backlog, None where Kafka cannot say
 */
private[planning] final class BackgroundBacklog(
    groupId: String,
    lookUp: () => Option[Long],
    clock: NanoClock = NanoClock.System
) extends Logging {

  @volatile private var last: Option[Long] = None
  @volatile private var checked: Option[Long] = None
  private val inFlight = new AtomicBoolean(false)
  private val thread: ExecutorService = Executors.newSingleThreadExecutor { task =>
    val t = new Thread(task, s"kafka-share-backlog[$groupId]")
    t.setDaemon(true)
    t
  }

  /** The last lookup's answer (None before the first, and while the cluster is unreachable). */
  def reported(): Option[Long] = {
    if (SubscribedTopics.due(checked, clock.nanoTime()) && inFlight.compareAndSet(false, true)) {
      thread.execute { () =>
        try last = lookUp()
        catch {
          case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.BrokerUnreachable => last = None
          case _: InterruptedException => () // the stream stopped
          case NonFatal(e) =>
            logWarning(s"Reading the backlog of share group '$groupId' failed", e)
            last = None
        } finally {
          checked = Some(clock.nanoTime())
          inFlight.set(false)
        }
      }
    }
    last
  }

  /** No lookup is running. */
  private[planning] def idle: Boolean = !inFlight.get()

  def close(): Unit = thread.shutdownNow()
}
