package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.ShareConsumerPool

/**
 * The driver's planning of one query run, as one immutable value: what [[RoundPolicy]] last saw of
 * the group's backlog and the slots, and which rounds the run offered, planned and committed.
 * [[RoundPlanner]] holds it. Its steps are pure: the shells ([[RoundPolicy]] for Kafka's lookups,
 * [[RoundPlanner]] for Spark's calls) feed them what the group, the tasks and the clock showed.
 *
 * @param backlog             the group's backlog as last looked up (None: unknown, so a round polls)
 * @param backlogChecked      when the backlog was last looked up
 * @param acknowledgedAtCheck the acknowledged-records counter at that lookup
 * @param quietRound          the last round the backlog was told found nothing ([[Backlog.roundFoundNothing]])
 * @param flowing             the last round acquired records: a consumer that finds none now is outpaced, not idle
 * @param offeredNothing      the last call of `latestOffset` offered no round
 * @param offeredAPoll        the run has offered a round that polls: its consumers have joined the group
 * @param seenHomes           per slot, its home when a drain last looked
 * @param slotMovedAt         when a drain last saw a slot's home change
 * @param availableNow        Trigger.AvailableNow's target, once it started
 * @param offeredRounds       rounds offered and not planned yet, and whether their tasks poll
 * @param lastPlanned         the round planned last
 * @param committedRound      the highest round whose batch Spark committed in this run
 */
private[planning] final case class PlanningState(
    backlog: Option[Long] = None,
    backlogChecked: Option[Long] = None,
    acknowledgedAtCheck: Long = 0L,
    quietRound: Long = -1L,
    flowing: Boolean = false,
    offeredNothing: Boolean = false,
    offeredAPoll: Boolean = false,
    seenHomes: Map[Int, String] = Map.empty,
    slotMovedAt: Option[Long] = None,
    availableNow: Option[AvailableNowTarget] = None,
    offeredRounds: Map[Long, Boolean] = Map.empty,
    lastPlanned: Option[PlannedRound] = None,
    committedRound: Long = -1L
) {
  import PlanningState._

  /** Whether the backlog is due for a lookup at `now` ([[SubscribedTopics.RefreshNanos]] after the last). */
  def backlogDue(now: Long): Boolean = SubscribedTopics.due(backlogChecked, now)

  /** After a lookup of the backlog. */
  def checked(check: BacklogCheck): PlanningState =
    copy(backlog = check.backlog, backlogChecked = Some(check.at), acknowledgedAtCheck = check.acknowledged)

  /**
   * The last planned round, if it is to be told to the backlog as one that found nothing: not told
   * yet, it acquired nothing, no consumer joined the group in it and every slot's task read it.
   */
  def roundToTellQuiet(seen: RoundCounts): Option[PlannedRound] =
    lastPlanned.filter(p =>
      p.round != quietRound && seen.acquired(p) == 0 && seen.joined(p) == 0 && seen.everySlotRead(p)
    )

  def toldQuiet(round: Long): PlanningState = copy(quietRound = round)

  /**
   * As `latestOffset` asks for the round after `startRound`: what the round that started there
   * acquired, if it is the last planned one (None otherwise: it ran in another run, or not yet).
   */
  def acquiredFrom(startRound: Long, seen: RoundCounts): Option[Long] =
    lastPlanned.collect { case p if p.round == startRound => seen.acquired(p) }

  /**
   * How long a call that asks for a round waits before it decides: after a call that offered nothing,
   * with no backlog seen since, until the backlog's next lookup, if Spark triggers back to back.
   */
  def waitBeforeOffer(now: Long, triggersBackToBack: Boolean): Long =
    if (offeredNothing && backlog.exists(_ <= 0) && triggersBackToBack)
      backlogChecked.fold(0L)(checked => math.max(0L, SubscribedTopics.RefreshNanos - (now - checked)))
    else 0L

  /** Per slot, its home now: a drain notes when a slot moved ([[slotMovedRecently]]). */
  def sawHomes(homes: Map[Int, String], now: Long): PlanningState = {
    val moved = homes.exists { case (slot, home) => seenHomes.get(slot).exists(_ != home) }
    copy(seenHomes = homes, slotMovedAt = if (moved) Some(now) else slotMovedAt)
  }

  /**
   * Whether a slot's tasks moved to another executor less than [[LeftBehindReleaseNanos]] ago. The
   * consumer left behind RELEASEs what it holds once a task of the query, or the executor's janitor,
   * finds it there; until then its records count as taken, and a drain that ended then would leave
   * them to the group.
   */
  def slotMovedRecently(now: Long): Boolean = slotMovedAt.exists(now - _ < LeftBehindReleaseNanos)

  /** The backlog lookup a call that asks for a round needs before [[offer]], if any. */
  def lookupBeforeOffer(seen: OfferSeen): Option[BacklogLookup] = availableNow match {
    case Some(target) => if (drainNeedsBacklog(target, seen)) Some(BacklogLookup.Forced) else None
    case None =>
      if (offeredAPoll && !seen.acquired.exists(_ > 0) && backlogDue(seen.now)) Some(BacklogLookup.IfDue)
      else None
  }

  /**
   * The round after the last committed one, once the lookup [[lookupBeforeOffer]] asked for is in
   * this state: Some(true) for a round that polls, Some(false) for one that only settles what the
   * consumers hold (the closing round of Trigger.AvailableNow), None for no round yet.
   */
  def offer(seen: OfferSeen): (PlanningState, Option[Boolean]) = {
    val lastRoundAcquired = seen.acquired.getOrElse(0L)
    val next = availableNow match {
      case Some(target) =>
        val drained = drainedByCount(target, seen) ||
          (drainNeedsBacklog(target, seen) && backlog.contains(0L) && seen.quietForALock)
        if (!drained) Some(true) else if (lastRoundAcquired > 0) Some(false) else None
      case None =>
        // A run's first round polls whatever the backlog, so that its consumers join the group and
        // Kafka settles their assignment while the topic is idle. Joining when records arrive, the
        // first consumer would be assigned every partition and acquire records of them, then lose
        // some to the others a second or two later; Kafka's client fails the acknowledgements of a
        // partition it no longer has, so those records would come back only when their locks expire.
        if (!offeredAPoll || lastRoundAcquired > 0 || backlog.forall(_ > 0)) Some(true) else None
    }
    (
      copy(
        flowing = lastRoundAcquired > 0,
        offeredNothing = next.isEmpty,
        offeredAPoll = offeredAPoll || next.contains(true)
      ),
      next
    )
  }

  private def drainedByCount(target: AvailableNowTarget, seen: OfferSeen): Boolean =
    target.reached(seen.taken) && !seen.slotMoved

  /** A drain not done by its count may still be: its last round found nothing and Kafka says none is left. */
  private def drainNeedsBacklog(target: AvailableNowTarget, seen: OfferSeen): Boolean =
    !drainedByCount(target, seen) && seen.acquired.contains(0L)

  /**
   * Whether the backlog a progress report shows is to be looked up now: when due, or at once after
   * a round that acquired nothing acknowledged records.
   */
  def reportNeedsLookup(now: Long, lastRoundAcquired: Long, acknowledged: Long): Boolean =
    backlogDue(now) || (lastRoundAcquired == 0 && acknowledged != acknowledgedAtCheck)

  def offered(round: Long, poll: Boolean): PlanningState = copy(offeredRounds = offeredRounds.updated(round, poll))

  /** A round's plan takes its offer: None if this run did not offer it (a batch re-run from the offset log). */
  def takeOffer(round: Long): (PlanningState, Option[Boolean]) =
    (copy(offeredRounds = offeredRounds - round), offeredRounds.get(round))

  /** The plan of `round`, if it is the one planned last: every plan of a round must be the same. */
  def planOf(round: Long): Option[PlannedRound] = lastPlanned.filter(_.round == round)

  def planned(round: PlannedRound): PlanningState = copy(lastPlanned = Some(round))

  def committed(round: Long): PlanningState = copy(committedRound = math.max(committedRound, round))

  /** The round a stop settles: the highest committed, by this run or by the query's own record (`queryCommitted`). */
  def settledAtStop(queryCommitted: Option[Long]): Long =
    queryCommitted.fold(committedRound)(math.max(committedRound, _))
}

private[planning] object PlanningState {
  val Initial: PlanningState = PlanningState()

  /** How long after a slot moved its consumer left behind may take to release what it holds: two janitor rounds, and a margin. */
  val LeftBehindReleaseNanos: Long = ShareConsumerPool.TidyInterval.multipliedBy(2).plusSeconds(2).toNanos
}

/** A lookup of the backlog begun `at`, with the acknowledged-records counter then, and its answer (None: unknown). */
private[planning] final case class BacklogCheck(at: Long, acknowledged: Long, backlog: Option[Long])

/** Whether a lookup runs whatever the time since the last ([[Forced]]), or only once due. */
private[planning] sealed trait BacklogLookup

private[planning] object BacklogLookup {
  case object Forced extends BacklogLookup
  case object IfDue extends BacklogLookup
}

/**
 * What the tasks reported so far: the acquired-records and joined-consumers counters, and the round
 * each slot last read.
 */
private[planning] final case class RoundCounts(acquiredTotal: Long, joinedTotal: Long, slotRounds: Map[Int, Long]) {
  def acquired(round: PlannedRound): Long = acquiredTotal - round.acquiredBefore

  def joined(round: PlannedRound): Long = joinedTotal - round.joinedBefore

  /** Not so when a slot's task did not run (foreachBatch need not read its batch): its consumer did not poll. */
  def everySlotRead(round: PlannedRound): Boolean =
    round.partitions.indices.forall(slot => slotRounds.get(slot).exists(_ >= round.round))
}

/**
 * What a call that asks for a round saw before it decides.
 *
 * @param now           the time, after any wait
 * @param acquired      what the round after the last committed one acquired, if this run planned it
 * @param taken         a drain's records taken so far (what the run took, less what lost consumers held)
 * @param slotMoved     a drain's slot moved recently ([[PlanningState.slotMovedRecently]])
 * @param quietForALock [[Backlog.quietForALock]], after the lookup
 */
private[planning] final case class OfferSeen(
    now: Long,
    acquired: Option[Long],
    taken: Long = 0L,
    slotMoved: Boolean = false,
    quietForALock: Boolean = false
)

/**
 * What Trigger.AvailableNow must drain: the backlog when it started (None if Kafka could not say,
 * for a group that has not read yet; then the query drains until a round finds nothing).
 */
private[planning] final case class AvailableNowTarget(takenAtStart: Long, records: Option[Long]) {

  /**
   * Counts what the run took ([[io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics.taken]]):
   * a record released, or whose lock expired before its ACCEPT, went back to the group, and is
   * drained again.
   */
  def reached(taken: Long): Boolean = records.exists(taken - takenAtStart >= _)
}
