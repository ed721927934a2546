package io.github.sparkkafkashare.executor

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, HeldRecords}
import org.apache.kafka.common.errors.GroupAuthorizationException

/**
 * What a slot's consumer is doing, as one immutable value: a state of the slot's protocol
 * ([[SlotProtocol]] has the transitions; docs/architecture.md draws them).
 *
 *  - [[SlotState.Idle]]: it holds no round's records. After an empty poll the client fetches in the
 *    background, and the renewer takes what arrives in ahead of the next round (`ahead`).
 *  - [[SlotState.Holding]]: it holds the records of a round (maybe none) until a task settles them.
 *  - [[SlotState.Stopped]]: its run stops: it left the group and polls no more; what it holds waits
 *    for its close.
 *  - [[SlotState.TurnedAway]]: the group was full when it asked to join; it never will, and the
 *    slot's next task replaces it.
 *  - [[SlotState.Refused]]: the group's ACLs refused it; every later round throws the refusal again
 *    (Kafka's client throws it from one call only, and its later polls return nothing).
 *  - [[SlotState.Closed]].
 */
private[executor] sealed trait SlotState {
  def facts: SlotFacts

  /** The round whose records it holds, if any. */
  def round: Option[HeldRecords] = None

  /** Records taken in ahead of the next round. */
  def ahead: Option[HeldRecords] = None

  /** Whether it polls no more. */
  def ended: Boolean = true

  /** This state once what it holds of a round is settled, knowing `facts`. */
  def settled(facts: SlotFacts): SlotState = this match {
    case s: SlotState.Holding => SlotState.Idle(facts, s.ahead)
    case s: SlotState.Stopped => s.copy(facts = facts, round = None)
    case s: SlotState.Idle => s.copy(facts = facts)
    case s: SlotState.TurnedAway => s.copy(facts = facts)
    case s: SlotState.Refused => s.copy(facts = facts)
    case s: SlotState.Closed => s.copy(facts = facts)
  }

  /** This state once what it took in ahead is released. */
  def withoutAhead: SlotState = this match {
    case s: SlotState.Idle => s.copy(ahead = None)
    case s: SlotState.Holding => s.copy(ahead = None)
    case s: SlotState.Stopped => s.copy(ahead = None)
    case s => s
  }
}

private[executor] object SlotState {
  final case class Idle(facts: SlotFacts, override val ahead: Option[HeldRecords] = None) extends SlotState {
    override def ended: Boolean = false
  }

  /** `ahead` only while the round holds no records: the renewer takes records in only then. */
  final case class Holding(facts: SlotFacts, held: HeldRecords, override val ahead: Option[HeldRecords] = None)
    extends SlotState {
    override def round: Option[HeldRecords] = Some(held)
    override def ended: Boolean = false
  }
  final case class Stopped(
      facts: SlotFacts,
      override val round: Option[HeldRecords],
      override val ahead: Option[HeldRecords]
  ) extends SlotState
  final case class TurnedAway(facts: SlotFacts) extends SlotState
  final case class Refused(facts: SlotFacts, refusal: GroupAuthorizationException) extends SlotState
  final case class Closed(facts: SlotFacts) extends SlotState

  def initial(nowNanos: Long): SlotState =
    Idle(SlotFacts(
      Set.empty,
      joined = false,
      CommittedRound(-1L, AcknowledgementMarks.None),
      PollDating(nowNanos, nowNanos)
    ))
}

/**
 * What a slot knows whatever its state.
 *
 * @param subscribed the topics its consumer subscribes to
 * @param joined     whether it has polled: its first poll is when it joins the group
 * @param committed  the highest round it was told is committed, and the marks of that round
 * @param dating     when what its polls return was acquired, at the latest
 */
private[executor] final case class SlotFacts(
    subscribed: Set[String],
    joined: Boolean,
    committed: CommittedRound,
    dating: PollDating
)

/** The highest round a slot was told is committed, and the explicit marks of that round. */
private[executor] final case class CommittedRound(round: Long, marks: AcknowledgementMarks) {

  /** This, having learned that `through` is committed with `latest` marks. */
  def learned(through: Long, latest: AcknowledgementMarks): CommittedRound =
    if (through < round) this
    else CommittedRound(through, if (latest.round >= marks.round) latest else marks)
}

/**
 * The dating of a slot's polls. A poll that returns nothing leaves the client fetching in the
 * background, and what it fetches is acquired, its locks running, while it waits in the client; a
 * poll may also leave part of what it fetched there. So a poll's records are dated from the start of
 * the last poll that found the client's buffer empty.
 *
 * @param bufferEmptySinceNanos start of the last poll that returned nothing
 * @param takenInAtNanos        when the renewer last took in what the background fetch brought
 * @param fetching              the last poll returned nothing: the client fetches in the background
 */
private[executor] final case class PollDating(
    bufferEmptySinceNanos: Long,
    takenInAtNanos: Long,
    fetching: Boolean = false
) {

  /** After a poll that started at `startedAt` and returned `records`. */
  def after(startedAt: Long, records: Int): PollDating =
    if (records == 0) copy(bufferEmptySinceNanos = startedAt, fetching = true) else copy(fetching = false)
}
