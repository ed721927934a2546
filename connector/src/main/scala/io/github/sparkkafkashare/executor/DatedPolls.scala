package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.atomic.AtomicLong

import io.github.sparkkafkashare.acknowledgements.HeldRecords
import org.apache.kafka.common.errors.GroupMaxSizeReachedException
import org.apache.spark.internal.Logging

/**
 * The polls of one slot's share consumer, each dated: a poll that returns nothing leaves the client
 * fetching in the background, and what it fetches is acquired, its locks running, while it waits in
 * the client; a poll may also leave part of what it fetched there. So the records a poll returns
 * are dated from the start of the last poll that found the client's buffer empty. Called under the
 * slot's consumer lock.
 */
private[executor] final class DatedPolls(consumer: ShareConsumerClient, key: SlotKey) {
  /** Start of the last poll that returned nothing: whatever the client returns later was acquired after it. */
  private var bufferEmptySinceNanos: Long = System.nanoTime()
  private var fetching = false
  /**
   * The group had as many members as the broker allows (`group.share.max.size`) when this consumer
   * asked to join. Kafka's client then gives up on the group for good, so the slot's next task
   * replaces the consumer with one that asks again: the query takes the place once another member
   * leaves (say, one of its own previous run's, whose session outlives a crash).
   */
  @volatile private var groupFull = false

  /** The last poll returned nothing, so the client fetches in the background until records arrive. */
  def fetchingInBackground: Boolean = fetching

  /** The full group turned this consumer away: it polls no more. */
  def turnedAway: Boolean = groupFull

  /** Polls until records arrive or `timeout` passes. */
  def untilRecords(timeout: Duration): HeldRecords = {
    val deadline = System.nanoTime() + timeout.toNanos
    // A zero-timeout poll first: records already in the client come back from it, and if none are,
    // what the longer polls bring was fetched after it started.
    var polled = once(Duration.ZERO)
    var remaining = deadline - System.nanoTime() // read once per turn: a later read could be negative
    while (polled.size == 0 && remaining > 0 && !groupFull) {
      polled = once(Duration.ofNanos(remaining))
      remaining = deadline - System.nanoTime()
    }
    polled
  }

  /** One poll; its records are dated from the last poll that returned nothing, and belong to no round yet. */
  def once(timeout: Duration): HeldRecords = {
    val startedAt = System.nanoTime()
    // From a task's poll or the renewer's, whichever first meets it: the slot's next task replaces the consumer.
    val polled = try consumer.poll(timeout) catch {
      case e: GroupMaxSizeReachedException =>
        groupFull = true
        DatedPolls.warnTurnedAway(key, e)
        Polled(new java.util.ArrayList(), Map.empty)
    }
    val list = polled.records
    val dated = HeldRecords(HeldRecords.NoRound, list, bufferEmptySinceNanos, topicIds = polled.topicIds)
    fetching = list.isEmpty
    if (list.isEmpty) bufferEmptySinceNanos = startedAt
    dated
  }
}

private object DatedPolls extends Logging {
  private val WarnInterval = Duration.ofMinutes(1)
  private val lastWarnedNanos = new AtomicLong(System.nanoTime() - WarnInterval.toNanos)

  /** At most once a minute per JVM: while the group stays full, every round of the slot is turned away. */
  def warnTurnedAway(key: SlotKey, e: GroupMaxSizeReachedException): Unit = {
    val last = lastWarnedNanos.get()
    if (System.nanoTime() - last >= WarnInterval.toNanos && lastWarnedNanos.compareAndSet(last, System.nanoTime())) {
      logWarning(s"Slot ${key.slot}: the share group turned its consumer away (${e.getMessage}). The slot reads " +
        "nothing and asks again each round; the query's other consumers read on. Lower 'kafka.share.parallelism', " +
        "stop other members of the group, or raise the broker's group.share.max.size.")
    }
  }
}
