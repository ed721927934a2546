package io.github.sparkkafkashare.executor

import java.time.Duration

import scala.util.control.NonFatal

import io.github.sparkkafkashare.acknowledgements.HeldRecords
import io.github.sparkkafkashare.executor.SlotState._
import org.apache.kafka.common.errors.GroupMaxSizeReachedException
import org.apache.spark.internal.Logging

/**
 * The polls of a slot's transitions ([[SlotProtocol]]): how long a round's first poll waits, and
 * how each poll dates its records and meets a group that turns the consumer away.
 */
private[executor] final class SlotPolls(client: ShareConsumerClient, slot: Int) {
  import SlotPolls._

  /** Polls until records arrive or `timeout` passes: a zero-timeout poll first, so what the longer ones bring is dated from it. */
  def untilRecords(state: Idle, timeout: Duration): (SlotState, HeldRecords) = {
    val deadline = System.nanoTime() + timeout.toNanos
    var (next, polled) = pollOnce(state, Duration.ZERO)
    var remaining = deadline - System.nanoTime() // read once per turn: a later read could be negative
    while (polled.size == 0 && remaining > 0 && !next.isInstanceOf[TurnedAway]) {
      val (again, records) = pollOnce(next.asInstanceOf[Idle], Duration.ofNanos(remaining))
      next = again
      polled = records
      remaining = deadline - System.nanoTime()
    }
    (next, polled)
  }

  /** One poll; its records are dated from the last poll that returned nothing, and belong to no round yet. */
  def pollOnce(state: Idle, timeout: Duration): (SlotState, HeldRecords) = {
    val startedAt = System.nanoTime()
    val lockedSince = state.facts.dating.bufferEmptySinceNanos
    val polled =
      try client.poll(timeout)
      catch {
        // From a task's poll or the renewer's, whichever first meets it: the slot's next task replaces the consumer.
        case e: GroupMaxSizeReachedException =>
          SlotPolls.warnTurnedAway(slot, e)
          return (TurnedAway(state.facts), HeldRecords(HeldRecords.NoRound, new java.util.ArrayList(), lockedSince))
        case NonFatal(e) => throw SlotTransitionFailed(state, e)
      }
    val dating = state.facts.dating.after(startedAt, polled.records.size)
    (
      state.copy(facts = state.facts.copy(dating = dating)),
      HeldRecords(HeldRecords.NoRound, polled.records, lockedSince, topicIds = polled.topicIds)
    )
  }

  /**
   * A consumer that joins just after another gets an empty assignment first, and its partitions with
   * the group's next assignment, at most an assignment interval after the one made as the other
   * joined. They reach it in the answer to the heartbeat that acknowledges the empty assignment, which
   * Kafka's client (4.3) gets only as this first poll returns: a poll that ends before the group
   * assigns again leaves them to the next regular heartbeat, 5 s on, and one that ends later than just
   * after holds the round for nothing (docs/benchmarks.md, "The first batch at P=2 and P=4"). With a
   * short interval (0 assigns each consumer as it joins), the poll still lasts long enough to join
   * and fetch.
   */
  def firstPollTimeout(timeout: Duration, limits: GroupLimits): Duration = {
    val justAfter = Seq(Duration.ofMillis(limits.assignmentIntervalMs).plus(AssignmentMargin), JoinAndFetch).max
    Seq(justAfter, timeout).min
  }
}

private[executor] object SlotPolls extends Logging {

  /** For the group's next assignment, due at most an assignment interval after this consumer joined, to be made. */
  private val AssignmentMargin = Duration.ofMillis(200)

  /** A new group's first consumer has records about 0.5 s after it joined (docs/benchmarks.md, "Joining the group"). */
  private val JoinAndFetch = Duration.ofSeconds(1)
  private val WarnInterval = Duration.ofMinutes(1)
  private val lastWarnedNanos = new java.util.concurrent.atomic.AtomicLong(System.nanoTime() - WarnInterval.toNanos)

  /**
   * At most once a minute per JVM: while the group stays full, every round of the slot is turned away.
   * The group had as many members as the broker allows (`group.share.max.size`); Kafka's client then
   * gives up on the group for good, so the slot's next task replaces the consumer with one that asks
   * again: the query takes the place once another member leaves (say, one of its own previous run's,
   * whose session outlives a crash).
   */
  private def warnTurnedAway(slot: Int, e: GroupMaxSizeReachedException): Unit = {
    val last = lastWarnedNanos.get()
    if (System.nanoTime() - last >= WarnInterval.toNanos && lastWarnedNanos.compareAndSet(last, System.nanoTime())) {
      logWarning(s"Slot $slot: the share group turned its consumer away (${e.getMessage}). The slot reads " +
        "nothing and asks again each round; the query's other consumers read on. Lower 'kafka.share.parallelism', " +
        "stop other members of the group, or raise the broker's group.share.max.size.")
    }
  }
}
