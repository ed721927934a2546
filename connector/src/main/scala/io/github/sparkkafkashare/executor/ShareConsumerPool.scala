package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.{CompletableFuture, ConcurrentHashMap, ExecutorService, Executors, ScheduledExecutorService, ThreadFactory, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, DeliveredRecordsIndex}
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.metrics.KafkaShareTaskMetric
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.spark.internal.Logging
import org.apache.spark.sql.kafkashare.ExecutorLocality

/**
 * The share consumers living in this JVM (an executor, or the driver in local mode), one per slot
 * of each running query. They outlive tasks on purpose: a consumer per task would churn group
 * membership, and the consumer that acquired records is the only one that may acknowledge them.
 *
 * A consumer is closed when its query stops, or by the janitor ([[ConsumerJanitor]]) once unused for
 * `spark.kafkaShare.consumer.cache.timeout` (5 minutes by default). One whose slot moved to another
 * executor releases what it holds at the next task of its query here (and stays open, in case the
 * slot comes back soon), or when the janitor finds it unused (and leaves the group), whichever
 * comes first. Every [[RenewCheckInterval]] the locks of records that wait for their batch to
 * commit are renewed, each slot's on a thread of its own: a renewal waits for the broker (up to
 * 10 s), and neither a slow close nor another slot's slow renewal may hold one back past its locks'
 * expiry. When the JVM exits, what the janitor has begun closing is finished and the consumers left
 * are closed ([[closeAllAtExit]]).
 */
private[sparkkafkashare] object ShareConsumerPool extends Logging {

  /** How often the janitor ([[ConsumerJanitor]]) looks at consumers no task uses, and how long one must have been unused. */
  val TidyInterval: Duration = Duration.ofSeconds(5)
  val CloseTimeout: Duration = Duration.ofSeconds(30)

  /** Well under the shortest lock a broker allows (group.share.min.record.lock.duration.ms, 1 s at least). */
  val RenewCheckInterval: Duration = Duration.ofMillis(200)

  private val slots = new ConcurrentHashMap[SlotKey, ShareConsumerSlot]()

  /**
   * Counts of failed tasks, which Spark drops, for the slot's next task here to report, or, once the
   * slot runs elsewhere, [[releaseLeftBehind]] (see [[keepUnreported]]).
   */
  private val unreported = new ConcurrentHashMap[SlotKey, Map[KafkaShareTaskMetric, Long]]()

  /** Slots whose renewal is under way: the next check skips them. */
  private val renewing = ConcurrentHashMap.newKeySet[SlotKey]()

  /** How long the JVM's exit waits, in all, for the janitor and for the consumers to close. */
  val ExitWait: Duration = Duration.ofSeconds(10)

  /** Runs the janitor ([[ConsumerJanitor.tidy]]) and the renewal checks ([[renewLocks]]) on two threads, so neither waits for the other. */
  private lazy val background: ScheduledExecutorService = {
    val executor = Executors.newScheduledThreadPool(2, daemonThreads("kafka-share-consumer-pool"))
    // Skipped while no SparkContext runs: an exception here would end the schedule for the JVM's life.
    executor.scheduleWithFixedDelay(
      () => ExecutorLocality.runningExecutor().foreach(ConsumerJanitor.tidy(_)),
      TidyInterval.toMillis,
      TidyInterval.toMillis,
      TimeUnit.MILLISECONDS
    )
    executor.scheduleWithFixedDelay(
      () => renewLocks(),
      RenewCheckInterval.toMillis,
      RenewCheckInterval.toMillis,
      TimeUnit.MILLISECONDS
    )
    Runtime.getRuntime.addShutdownHook(new Thread(() => closeAllAtExit(), "kafka-share-consumer-pool-exit"))
    executor
  }

  /**
   * When the JVM exits (its application ended, or the cluster manager stopped the executor, with
   * the grace period it gives), lets the janitor finish the closes it has begun, then closes the
   * consumers left, each settled by what its slot last learned. The janitor closes a stopped run's
   * consumers that the run's closing job missed (their executor was busy) a few seconds after the
   * stop: they leave the group first, then ACCEPT what the query committed as they close. An
   * application that ends right after the stop would otherwise kill them in between, and the group
   * would deliver those records again.
   */
  private[executor] def closeAllAtExit(): Unit = {
    val deadline = System.nanoTime() + ExitWait.toNanos
    def timeLeft = Duration.ofNanos(math.max(0L, deadline - System.nanoTime()))
    ConsumerJanitor.awaitLook(timeLeft)
    slots.forEach { (key, slot) =>
      if (slot.lock.tryLock(timeLeft.toNanos, TimeUnit.NANOSECONDS)) {
        try close(key, committedThrough = -1L, AcknowledgementMarks.None, timeLeft)
        finally slot.lock.unlock()
      } else logWarning(s"The share consumer of slot ${key.slot} is still in use as the JVM exits; it is not closed")
    }
  }

  /** Threads for calls that wait for the broker: lock renewals, and a stopping run's consumers leaving and closing. */
  private lazy val brokerCalls: ExecutorService =
    Executors.newCachedThreadPool(daemonThreads("kafka-share-broker-call"))

  private def daemonThreads(prefix: String): ThreadFactory = {
    val threads = new AtomicInteger()
    r => {
      val t = new Thread(r, s"$prefix-${threads.incrementAndGet()}")
      t.setDaemon(true)
      t
    }
  }

  /**
   * How long a task that holds one slot waits for another before it fails (see [[borrow]]); longer
   * than the janitor and the renewals hold a slot.
   */
  val OtherSlotWait: Duration = Duration.ofSeconds(5)

  /**
   * How long a stopping run waits for a task that uses a slot's consumer, at each step (stop fetching,
   * close). A task that runs on past its query's stop (user code that ignores the interrupt) keeps the
   * consumer and its records, which stay locked; once it ends, the janitor closes the consumer as the
   * stop would have ([[ConsumerJanitor]]), or, if the JVM exits first, the group delivers the records again when
   * their locks expire. Without a bound, such a task would hold up the query's stop.
   */
  val InUseWait: Duration = Duration.ofSeconds(10)

  /**
   * The slot's consumer, created on first use, locked for the caller until [[giveBack]]; it takes
   * the group's configs as the caller's round has them. A task holds its slot until it completes,
   * and reads one slot, except in a cartesian product of a batch with itself: there a task holding
   * slot a waits for b while another holding b may wait for a, forever. So a task that holds another
   * slot waits at most [[OtherSlotWait]], then fails with what to do instead.
   */
  def borrow(key: SlotKey, config: => java.util.Map[String, Object], limits: GroupLimits): ShareConsumerSlot = {
    background // started with the first consumer
    val slot = slots.computeIfAbsent(key, k => new ShareConsumerSlot(k, config, limits))
    if (!slot.lock.tryLock()) {
      val held = slots.values().asScala.filter(s => (s ne slot) && s.lock.isHeldByCaller).map(_.key.slot).toSeq
      if (held.isEmpty) slot.lock.lockInterruptibly()
      else if (!slot.lock.tryLock(OtherSlotWait.toMillis, TimeUnit.MILLISECONDS)) {
        throw KafkaShareErrors.batchJoinedWithItself(held, key.slot, OtherSlotWait.toMillis)
      }
    }
    if (slots.get(key) ne slot) { // closed while we waited
      slot.lock.unlock()
      borrow(key, config, limits)
    } else {
      slot.follow(limits)
      slot
    }
  }

  /**
   * Swaps a borrowed slot's consumer for one with `config`: the query's poll sizes changed with the
   * partitions it subscribes to, or the group turned the consumer away. The caller has settled the
   * slot, so closing it releases only what the client took in ahead (delivered again), and the new
   * consumer joins the group in its place. Returns the new slot, borrowed.
   */
  def replace(
      slot: ShareConsumerSlot,
      config: java.util.Map[String, Object],
      limits: GroupLimits
  ): ShareConsumerSlot = {
    val pollSize = ConsumerConfig.MAX_POLL_RECORDS_CONFIG
    if (slot.turnedAwayAsGroupFull) {
      logDebug(s"Slot ${slot.key.slot}: replacing its consumer, which the full group turned away, to ask again.")
    } else if (slot.config.get(pollSize) == config.get(pollSize)) {
      // The settings hold secrets: name only what changed.
      logInfo(
        s"Slot ${slot.key.slot}: replacing its consumer, whose settings changed."
      )
    } else {
      logInfo(
        s"Slot ${slot.key.slot}: replacing its consumer, whose $pollSize goes from ${slot.config.get(pollSize)} " +
          s"to ${config.get(pollSize)} (the subscribed partitions or the group's lock limit changed)."
      )
    }
    close(slot.key, committedThrough = -1L, AcknowledgementMarks.None)
    slot.lock.unlock()
    borrow(slot.key, config, limits)
  }

  /**
   * Keeps what a failed task counted: the acquisitions, acknowledgements and joins happened, but Spark
   * drops a failed task's metrics and accumulator updates. A retry that returns the records the failed
   * attempt kept does not count them again, so without this `recordsAcquired` fell short.
   */
  def keepUnreported(key: SlotKey, counts: Map[KafkaShareTaskMetric, Long]): Unit =
    unreported.merge(key, counts, (kept, more) => KafkaShareTaskMetric.sum(kept.toSeq ++ more))

  /** What failed tasks of the slot counted here since its last task, for this task to report. */
  def takeUnreported(key: SlotKey): Map[KafkaShareTaskMetric, Long] =
    Option(unreported.remove(key)).getOrElse(Map.empty)

  def giveBack(slot: ShareConsumerSlot): Unit = {
    slot.lastUsedNanos = System.nanoTime()
    slot.lock.unlock()
  }

  /** Whether this JVM's consumer of the slot holds what it acquired for `round`. */
  def holdsRound(key: SlotKey, round: Long): Boolean = Option(slots.get(key)).exists(_.holds(round))

  /**
   * Releases what this JVM's consumers of a run hold for slots whose tasks now run on other
   * executors (`homes`); see [[ShareConsumerSlot.releaseLeftBehind]]. A consumer in use is skipped,
   * the calling task's own included (its lock is reentrant, so tryLock alone would take it): a task
   * of its own slot settles it. Returns what to count for the run: what those consumers'
   * acknowledgements and locks did since their slot's last task here (the releases the broker applied
   * among them), and what
   * failed tasks of those slots counted here ([[keepUnreported]]), which the slot's next task here
   * was to report and may never come (the failed task's retry ran on another executor, and the slot
   * stayed there). Their acquisitions too: what a left-behind consumer holds goes back to the group,
   * and the release counted with it cancels them (`KafkaShareSourceMetrics.taken`).
   */
  def releaseLeftBehind(
      runId: String,
      homes: Map[Int, String],
      here: String,
      committedThrough: Long
  ): Map[KafkaShareTaskMetric, Long] = {
    val leftBehind = slotsOf(runId).filter { case (key, _) => homes.get(key.slot).exists(_ != here) }
    KafkaShareTaskMetric.sum(leftBehind.flatMap { case (key, slot) =>
      if (slot.lock.isHeldByCaller || !slot.lock.tryLock()) Nil
      else
        try {
          if (slots.get(key) ne slot) Nil
          else {
            val released = slot.releaseLeftBehind(committedThrough, CloseTimeout)
            if (released > 0) {
              logInfo(s"Released $released records the consumer of slot ${key.slot} held here: the slot now runs on " +
                s"executor ${homes(key.slot)}")
            }
            slot.drainAcknowledgementEvents().byMetric.toSeq ++ takeUnreported(key)
          }
        } finally slot.lock.unlock() // not giveBack: the janitor still closes it if its slot never comes back
    }).filter(_._2 > 0)
  }

  /**
   * Closes this JVM's consumers of a query run; returns how many it closed. A consumer whose slot
   * last ran on another executor than `here` (`slotHomes`) is one its tasks left behind: what it
   * holds may not be what the committed batch read there, so it RELEASEs everything rather than ACCEPT.
   * All at once: a close waits for the broker, up to [[CloseTimeout]] when it cannot be reached, and
   * one after another the stop of a query that failed with the cluster gone would wait that long for
   * each consumer.
   */
  def closeRun(
      runId: String,
      committedThrough: Long,
      marks: AcknowledgementMarks,
      slotHomes: Map[Int, String],
      here: String,
      inUseWait: Duration = InUseWait
  ): Int = {
    forgetRun(runId)
    stopFetching(slotsOf(runId).map(_._2), inUseWait)
    slotsOf(runId).map { case (key, _) =>
      CompletableFuture.supplyAsync[java.lang.Boolean](
        () => Boolean.box(closeAsRunEnds(key, committedThrough, marks, slotHomes, here, inUseWait)),
        brokerCalls
      )
    }.count(_.join())
  }

  private[executor] def allSlots: Seq[(SlotKey, ShareConsumerSlot)] = slots.asScala.toSeq

  private[executor] def slotsOf(runId: String): Seq[(SlotKey, ShareConsumerSlot)] = allSlots.filter(_._1.runId == runId)

  /**
   * Stops this JVM's consumers of a query run fetching, and waits out the fetches they had already
   * sent, so that none acquires what a consumer of the run releases as it closes: Kafka would count
   * a delivery, and the consumer would release the records again as it closes, so each consumer of
   * the run would bring a released record one delivery nearer the group's limit
   * (`share.delivery.count.limit`). [[closeRun]] does it first; the driver has every executor do it
   * before any closes; the janitor, before it closes consumers of a stopped run that the closing job
   * missed. All at once: each waits for the broker. Consumers already stopped return at once.
   */
  def stopFetching(runId: String): Unit = stopFetching(slotsOf(runId).map(_._2), InUseWait)

  private[executor] def stopFetching(running: Seq[ShareConsumerSlot], inUseWait: Duration): Unit =
    running.map(slot =>
      CompletableFuture.runAsync(
        () => {
          val inFlight = if (!lockUnlessInUse(slot, inUseWait)) Duration.ZERO
          else
            try slot.stopFetching()
            catch {
              case NonFatal(e) =>
                logWarning(s"The share consumer of slot ${slot.key.slot} could not leave the group before closing", e)
                Duration.ZERO
            } finally slot.lock.unlock()
          Thread.sleep(inFlight.toMillis)
        },
        brokerCalls
      )
    ).foreach(_.join())

  /** Locks a stopping run's slot, unless a task uses it for longer than `wait` (see [[InUseWait]]). */
  private def lockUnlessInUse(slot: ShareConsumerSlot, wait: Duration): Boolean =
    slot.lock.tryLock(wait.toMillis, TimeUnit.MILLISECONDS) || {
      logWarning(
        s"The share consumer of slot ${slot.key.slot} is still used by a task after $wait: it is closed once " +
          "the task ends, and its records stay locked until then."
      )
      false
    }

  private[executor] def closeAsRunEnds(
      key: SlotKey,
      committedThrough: Long,
      marks: AcknowledgementMarks,
      slotHomes: Map[Int, String],
      here: String,
      inUseWait: Duration = InUseWait
  ): Boolean =
    if (slotHomes.get(key.slot).forall(_ == here)) close(key, committedThrough, marks, inUseWait = inUseWait)
    else close(key, committedThrough = -1L, AcknowledgementMarks.None, inUseWait = inUseWait)

  private[executor] def close(
      key: SlotKey,
      committedThrough: Long,
      marks: AcknowledgementMarks,
      timeout: Duration = CloseTimeout,
      inUseWait: Duration = InUseWait
  ): Boolean = Option(slots.get(key)).exists { slot =>
    lockUnlessInUse(slot, inUseWait) && {
      try {
        if (slots.remove(key, slot)) {
          try slot.close(committedThrough, marks, timeout)
          catch {
            case NonFatal(e) => logWarning(s"Closing the share consumer of slot ${key.slot} failed", e)
          }
          true
        } else false
      } finally slot.lock.unlock()
    }
  }

  /** Drops what this JVM keeps of an ended run besides its consumers. */
  private[executor] def forgetRun(runId: String): Unit = {
    DeliveredRecordsIndex.forget(runId)
    unreported.keySet().removeIf(_.runId == runId)
  }

  private def renewLocks(): Unit = slots.values().forEach { slot =>
    if (renewing.add(slot.key)) brokerCalls.execute { () =>
      try slot.renewLocksIfDue()
      catch {
        case NonFatal(e) => logWarning(s"Renewing the record locks of slot ${slot.key.slot} failed", e)
      } finally renewing.remove(slot.key)
    }
  }
}
