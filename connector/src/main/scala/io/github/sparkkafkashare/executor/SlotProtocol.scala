package io.github.sparkkafkashare.executor

import java.time.Duration

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, HeldRecords, RecordCoordinates}
import io.github.sparkkafkashare.executor.SlotState._
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord}
import org.apache.spark.internal.Logging

/**
 * The transitions of a slot's protocol: each takes the slot's [[SlotState]], makes the calls of its
 * consumer the step needs, and returns the next state with what the caller asked for. The reader
 * drives settle, poll, the duplicate checks and release; the pool's renewer drives take-in and
 * renewal; the pool drives stop and close. docs/architecture.md draws the states and transitions.
 *
 * A transition that fails after its state moved on (a commit that throws once the records are
 * acknowledged) throws [[SlotTransitionFailed]] with the state it reached.
 *
 * @param fetchWait how long a fetch the client has sent may still acquire records: its
 *                  `fetch.max.wait.ms`, and a margin for the broker's answer to reach it
 */
private[executor] final class SlotProtocol(
    client: ShareConsumerClient,
    slot: Int,
    outcomes: AcknowledgementOutcomes,
    fetchWait: Duration
) extends Logging {
  import SlotProtocol._

  private val polls = new SlotPolls(client, slot)

  /**
   * Learns that rounds up to `committedThrough` are committed, with their `marks`, and acknowledges
   * what the slot holds: ACCEPT (or as marked) for a committed round, RELEASE for any other. A
   * consumer left behind (`atHome` false: its slot's last task ran elsewhere) RELEASEs all, since what
   * it holds may not be what the committed batch read. Acknowledgements ride on the next call that
   * sends them.
   */
  def settle(
      state: SlotState,
      committedThrough: Long,
      marks: AcknowledgementMarks,
      atHome: Boolean
  ): (SlotState, Settlement) = {
    val facts = state.facts.copy(committed = state.facts.committed.learned(committedThrough, marks))
    val settlement = state.round.fold(Settlement(0, 0, 0)) { held =>
      val committed = if (atHome) facts.committed.round else -1L
      var accepted, released, rejected, notHeld = 0
      held.records.forEach { r =>
        val ackType = held.settlement(committed, facts.committed.marks, r)
        if (!outcomes.acknowledge(client, r, ackType)) notHeld += 1
        else ackType match {
          case AcknowledgeType.ACCEPT => accepted += 1
          case AcknowledgeType.RELEASE => released += 1
          case _ => rejected += 1 // a settlement is ACCEPT, RELEASE or REJECT
        }
      }
      if (notHeld > 0) lostHold(held.round, notHeld, held.size)
      Settlement(accepted, released, rejected)
    }
    (state.settled(facts), settlement)
  }

  /**
   * Polls until records arrive or `timeout` passes, and holds what arrived for `round` (an empty
   * holding too: an evaluation of the same batch again must find nothing again, not poll anew).
   * Records taken in ahead are the round's records, without a poll. Records that may have waited in
   * the client for half their lock are renewed first; those whose renewal fails are left out (not
   * handed to Spark yet). A consumer's first poll, which joins the group, waits [[SlotPolls.firstPollTimeout]].
   * `inParts`: the round is logged in parts, each ACCEPTed once logged (`after-log`, [[HeldRecords.inParts]]).
   */
  def pollRound(
      state: SlotState,
      round: Long,
      topics: Set[String],
      timeout: Duration,
      limits: GroupLimits,
      inParts: Boolean
  ): (SlotState, java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]) = state match {
    case Refused(_, refusal) => throw refusal
    case s: Idle =>
      val subscribed = resubscribe(s, topics)
      if (topics.isEmpty) (
        Holding(subscribed.facts, HeldRecords(round, new java.util.ArrayList(), System.nanoTime(), inParts = inParts)),
        java.util.List.of()
      )
      else {
        val (polledState, polled) = subscribed.ahead match {
          case Some(ahead) => (subscribed.copy(ahead = None), ahead)
          case None =>
            val wait = if (subscribed.facts.joined) timeout else polls.firstPollTimeout(timeout, limits)
            polls.untilRecords(subscribed.copy(facts = subscribed.facts.copy(joined = true)), wait)
        }
        polledState match {
          case away: TurnedAway => (away, java.util.List.of())
          case idle: Idle =>
            val locked = RecordLockRenewal.renewIfDue(client, slot, polled, limits, outcomes)
            // Against the poll size the driver logs, this shows polls that came back short (docs/benchmarks.md, d).
            logDebug(s"Slot $slot, round $round: acquired ${locked.size} records")
            val held = locked.copy(round = round, hidden = Set.empty, unlocked = Nil, inParts = inParts)
            (Holding(idle.facts, held), locked.records)
          case other => throw new IllegalStateException(s"slot $slot: a poll left it $other")
        }
      }
    case other => throw new IllegalStateException(s"slot $slot: pollRound from ${SlotTransitions.nameOf(other)}")
  }

  /**
   * `after-log`: polls the next part of `round` once the last part's records are ACCEPTed, until
   * records arrive or `timeout` passes; records the renewer took in ahead meanwhile are the part's,
   * without a poll. The part's records join the round's held records; those of earlier parts stay
   * the round's, accepted. A poll that fails leaves the round held as it was, for an evaluation again.
   */
  def pollPart(
      state: SlotState,
      round: Long,
      timeout: Duration,
      limits: GroupLimits
  ): (SlotState, java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]) = {
    val holding = holdingRound(state, round)
    if (!holding.held.records.isEmpty) {
      throw new IllegalStateException(s"slot $slot polled a part of round $round before the last part was accepted")
    }
    val (polledState, polled) = holding.ahead match {
      case Some(ahead) => (Idle(holding.facts), ahead)
      case None =>
        try polls.untilRecords(Idle(holding.facts), timeout)
        catch {
          case SlotTransitionFailed(failed, cause) =>
            throw SlotTransitionFailed(holding.copy(facts = failed.facts), cause)
        }
    }
    // A consumer that joined is not turned away; should it be, the round ends with the parts it has.
    val locked = RecordLockRenewal.renewIfDue(client, slot, polled, limits, outcomes)
    val held = holding.held.copy(
      records = locked.records,
      lockedSinceNanos = locked.lockedSinceNanos,
      topicIds = holding.held.topicIds ++ locked.topicIds
    )
    (Holding(polledState.facts, held), locked.records)
  }

  /**
   * `after-log`: ACCEPTs the records of the round's current part, now that the records log holds
   * them, and waits for the answer: a next poll sent before it can find the group's lock limit still
   * taken by them, come back empty and end the round early. The round keeps them, accepted, for an
   * evaluation of its batch again. Returns how many the consumer still held to ACCEPT.
   */
  def acceptLogged(state: SlotState, round: Long, timeout: Duration): (SlotState, Int) = {
    val holding = holdingRound(state, round)
    val held = holding.held
    val accepted = acknowledgeAll(round, held.records, AcknowledgeType.ACCEPT)
    val handedOut =
      (held.records.asScala ++ held.unlocked).filterNot(r => held.hidden.contains(RecordCoordinates.of(r)))
    val next = holding.copy(held =
      held.copy(
        records = new java.util.ArrayList(),
        hidden = Set.empty,
        unlocked = Nil,
        accepted = held.accepted ++ handedOut
      )
    )
    if (!held.records.isEmpty) failingAs(next)(commit(timeout))
    (next, accepted)
  }

  /**
   * Real-time mode: ACCEPTs the first `processed` records of the round's current poll, which went
   * through the query, and RELEASEs the rest, which it never handed out. The acknowledgements ride on
   * the next poll or commit, and the round keeps none of these records. Returns how many the consumer
   * still held to ACCEPT.
   */
  def acceptProcessed(state: SlotState, round: Long, processed: Int): (SlotState, Int) = {
    val holding = holdingRound(state, round)
    val records = holding.held.records.asScala
    val accepted = acknowledgeAll(round, records.take(processed).asJava, AcknowledgeType.ACCEPT)
    acknowledgeAll(round, records.drop(processed).asJava, AcknowledgeType.RELEASE)
    (holding.copy(held = holding.held.copy(records = new java.util.ArrayList())), accepted)
  }

  /** Subscribes to `topics` if they changed, first releasing what was taken in ahead of the old ones. */
  private def resubscribe(state: Idle, topics: Set[String]): Idle =
    if (topics == state.facts.subscribed) state
    else {
      state.ahead.foreach(ahead => acknowledgeAll(ahead.round, ahead.records, AcknowledgeType.RELEASE))
      val next = Idle(state.facts.copy(subscribed = topics))
      failingAs(next) { if (topics.isEmpty) client.unsubscribe() else client.subscribe(topics) }
      next
    }

  /**
   * Takes redeliveries of records an earlier round handed to Spark out of what `round` hands to Spark,
   * and ACCEPTs them at once (the `checkpoint-dedup` and `two-phase-commit` strategies drop them): they
   * wait for no batch, and their locks would run on while this round's batch runs. Returns the rest.
   */
  def acceptDelivered(
      state: SlotState,
      round: Long,
      delivered: Set[RecordCoordinates]
  ): (SlotState, java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]) = {
    val holding = holdingRound(state, round)
    val (accepted, kept) = holding.held.records.asScala.partition(r => delivered.contains(RecordCoordinates.of(r)))
    acknowledgeAll(round, accepted.asJava, AcknowledgeType.ACCEPT)
    // The accepted ones are no longer this round's to settle, even if sending them fails.
    val next = holding.copy(held = holding.held.copy(records = new java.util.ArrayList(kept.asJava)))
    if (accepted.nonEmpty) failingAs(next)(commit(ShareConsumerPool.CloseTimeout))
    (next, next.held.visible)
  }

  /**
   * Keeps `loggedByOthers` held but out of what `round` hands to Spark: another slot logged them for
   * this same round first, and its batch holds them. They are settled with the round. Returns the rest.
   */
  def hide(
      state: SlotState,
      round: Long,
      loggedByOthers: Set[RecordCoordinates]
  ): (SlotState, java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]) = {
    val holding = holdingRound(state, round)
    val next = holding.copy(held = holding.held.copy(hidden = holding.held.hidden ++ loggedByOthers))
    (next, next.held.visible)
  }

  /** RELEASEs what `round` acquired, sends it, and returns it: no batch reads those records. */
  def releaseRound(
      state: SlotState,
      round: Long,
      timeout: Duration
  ): (SlotState, java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]) = state match {
    case s: Holding if s.held.round == round =>
      acknowledgeAll(round, s.held.records, AcknowledgeType.RELEASE)
      val next = Idle(s.facts, s.ahead)
      failingAs(next)(commit(timeout))
      (next, s.held.records)
    case other => (other, java.util.List.of())
  }

  /**
   * For a consumer left behind (its slot's tasks now run on another executor, so no task of its own
   * settles it): RELEASEs what it holds from committed rounds, and what it took in ahead, at once,
   * instead of renewing their locks until the pool closes it. Records of a later round belong to a
   * batch still running, and stay. Returns how many records of a round it released.
   */
  def releaseLeftBehind(state: SlotState, committedThrough: Long, timeout: Duration): (SlotState, Int) =
    if (state.ended || state.round.exists(_.round > committedThrough) || (state.round.isEmpty && state.ahead.isEmpty)) {
      (state, 0)
    } else {
      val (settled, settlement) = settle(state, committedThrough, AcknowledgementMarks.None, atHome = false)
      val next = releaseAhead(settled)
      failingAs(next)(commit(timeout))
      (next, settlement.released)
    }

  /**
   * Renews the locks of held records once half their duration has passed, so a batch may take
   * longer than the lock. While the slot's round is empty, first takes in what the client fetched in
   * the background since, so that those records keep their locks too until the next round; every
   * quarter of a lock is enough, since they are dated from the last empty poll and renewed at half
   * (a poll each time the renewer comes round cost an idle stream CPU for nothing). A take-in poll
   * that fails leaves the slot as it was.
   */
  def renewIfDue(state: SlotState, limits: GroupLimits): SlotState = {
    val now = System.nanoTime()
    val facts = state.facts
    val afterTakeIn = state match {
      case s @ (_: Idle | _: Holding)
          if s.round.forall(_.size == 0) && s.ahead.isEmpty && facts.dating.fetching &&
            facts.subscribed.nonEmpty &&
            now - facts.dating.takenInAtNanos > RecordLockRenewal.lockNanos(client, limits) / 4 =>
        val idle = Idle(facts.copy(dating = facts.dating.copy(takenInAtNanos = now)))
        val takenIn =
          try polls.pollOnce(idle, Duration.ZERO)
          catch { case SlotTransitionFailed(_, cause) => throw SlotTransitionFailed(s, cause) }
        takenIn match {
          case (away: TurnedAway, _) => away
          case (polled: Idle, records) =>
            val ahead = Some(records).filter(_.size > 0)
            s match {
              case h: Holding => h.copy(facts = polled.facts, ahead = ahead)
              case _ => polled.copy(ahead = ahead)
            }
          case (other, _) => other
        }
      case s => s
    }
    def renewed(records: HeldRecords) = RecordLockRenewal.renewIfDue(client, slot, records, limits, outcomes)
    afterTakeIn match {
      case s: Holding => s.copy(held = renewed(s.held), ahead = s.ahead.map(renewed))
      case s: Idle => s.copy(ahead = s.ahead.map(renewed))
      case s => s
    }
  }

  /**
   * Leaves the group, so that the client sends no more fetches, and keeps what the slot holds for
   * [[close]] to settle. Returns how long a fetch the client had already sent may still acquire
   * records. Leaving waits for the group coordinator, up to the consumer's `default.api.timeout.ms`
   * if it cannot be reached.
   */
  def stopFetching(state: SlotState): (SlotState, Duration) = state match {
    case s @ (_: Idle | _: Holding) =>
      val next = Stopped(s.facts.copy(subscribed = Set.empty), s.round, s.ahead)
      if (s.facts.subscribed.isEmpty) (next, Duration.ZERO)
      else {
        failingAs(next)(client.unsubscribe())
        (next, fetchWait)
      }
    case ended => (ended, Duration.ZERO)
  }

  /** Settles what is held by what the slot knows is committed, releases what it took in ahead, and closes. */
  def close(state: SlotState, committedThrough: Long, marks: AcknowledgementMarks, timeout: Duration): SlotState = {
    val closed = Closed(state.facts)
    try {
      val (settled, _) = settle(state, committedThrough, marks, atHome = true)
      releaseAhead(settled)
    } catch {
      case NonFatal(e) => throw SlotTransitionFailed(closed, e)
    } finally client.close(timeout)
    closed
  }

  /** Sends what is marked and waits up to `timeout` for the answer ([[RecordLockRenewal.commit]]). */
  def commit(timeout: Duration): Option[Set[org.apache.kafka.common.TopicPartition]] =
    RecordLockRenewal.commit(client, slot, timeout)

  private def releaseAhead(state: SlotState): SlotState = {
    state.ahead.foreach(ahead => acknowledgeAll(ahead.round, ahead.records, AcknowledgeType.RELEASE))
    state.withoutAhead
  }

  private def holdingRound(state: SlotState, round: Long): Holding = state match {
    case s: Holding if s.held.round == round => s
    case other =>
      throw new IllegalStateException(s"slot $slot: round $round is not held (${other.getClass.getSimpleName})")
  }

  /**
   * Acknowledges each of `records` that the client still holds; warns once if it holds some no more.
   * Returns how many it acknowledged.
   */
  private def acknowledgeAll(
      round: Long,
      records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]],
      ackType: AcknowledgeType
  ): Int = {
    val notHeld = records.asScala.count(r => !outcomes.acknowledge(client, r, ackType))
    if (notHeld > 0) lostHold(round, notHeld, records.size)
    records.size - notHeld
  }

  /**
   * Counts as locks lost, and warns of once per call that meets them, records the client no longer
   * holds, whatever let them go (Kafka's client would throw on them). Records a renewal could not keep
   * do not get here: the renewal takes them out of the round's acknowledgements and counts them
   * itself. The group delivers them again.
   */
  private def lostHold(round: Long, notHeld: Int, of: Int): Unit = {
    outcomes.notHeld(notHeld)
    val which = if (round == HeldRecords.NoRound) "taken in ahead of a round" else s"of round $round"
    logWarning(s"Slot $slot: the consumer no longer holds $notHeld of the $of records $which; they count as " +
      "locks lost, and the group delivers them again.")
  }
}

private[executor] object SlotProtocol {

  /** `effect`, which follows the transition to `next`: if it throws, the slot is in `next` all the same. */
  private def failingAs[T](next: SlotState)(effect: => T): T =
    try effect
    catch { case NonFatal(e) => throw SlotTransitionFailed(next, e) }
}

/** A transition failed after the slot reached `next`: the slot is in `next`, and `cause` is what failed. */
private[executor] final case class SlotTransitionFailed(next: SlotState, cause: Throwable) extends Exception(cause)
