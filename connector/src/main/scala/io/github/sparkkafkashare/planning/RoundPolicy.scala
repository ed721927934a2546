package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.executor.{ShareConsumerPool, SlotLocations}
import io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics
import org.apache.spark.internal.Logging

/**
 * When a run offers Spark another round (`latestOffset`), and what the group's backlog is.
 *
 * A round that acquired records is always followed by another, even if the topic is idle: its
 * records are acknowledged by the next round. Otherwise a round runs while the backlog says records
 * wait, as Kafka's lag last showed it, asked at most every [[SubscribedTopics.RefreshNanos]]; a lag
 * that Kafka leaves stale after a round that found nothing does not count ([[Backlog]]). Under
 * Trigger.AvailableNow rounds run until the backlog at its start is taken.
 *
 * @param countedOutsideTasks what executors' janitors counted for the run, which no task reports
 * @param liveExecutors       the task locations of the live executors, the driver's among them
 * @param triggersBackToBack  Spark asks again 10 ms after a trigger that ran no batch (its default trigger)
 * @param clock               the driver's time ([[NanoClock]])
 */
private[planning] final class RoundPolicy(
    counters: KafkaShareSourceMetrics,
    backlog: Backlog,
    outage: OutageTolerance,
    topics: SubscribedTopics,
    slotLocations: SlotLocations,
    countedOutsideTasks: () => Map[String, Long],
    liveExecutors: () => Set[String],
    triggersBackToBack: Boolean,
    clock: NanoClock = NanoClock.System
) extends Logging {

  import RoundPolicy._

  private var lastBacklog: Option[Long] = None
  private var backlogChecked: Option[Long] = None

  /** [[KafkaShareSourceMetrics.acknowledged]] when the backlog was last asked for. */
  private var acknowledgedAtBacklogCheck = 0L

  /** The last round [[markLastRoundQuiet]] told the backlog of. */
  private var quietRound = -1L

  /** The last round acquired records: a consumer that finds none now is outpaced, not idle. */
  private var recordsFlowing = false

  /** The last call offered no round. */
  private var offeredNothing = false

  /** This run has offered a round that polls: its consumers have joined the group. */
  private var offeredAPoll = false

  /** Per slot, its home when [[slotMovedRecently]] last looked, and when a slot last moved. */
  private var seenHomes = Map.empty[Int, String]
  private var slotMovedAt: Option[Long] = None

  /** Set by Trigger.AvailableNow: the records to drain, counted from what the run had taken at its start. */
  private var availableNow: Option[AvailableNowTarget] = None
  private val lostConsumers = new LostConsumers(slotLocations, liveExecutors)

  /** Whether the last round acquired records. */
  def flowing: Boolean = recordsFlowing

  /**
   * The round after `startRound`, the last committed one: Some(true) for a round that polls,
   * Some(false) for one that only settles what the consumers hold (the closing round of
   * Trigger.AvailableNow), None for no round yet.
   */
  def nextRound(startRound: Long, lastPlanned: Option[PlannedRound]): Option[Boolean] = {
    val heldFromStart = lastPlanned.collect { case p if p.round == startRound => p.acquired(counters) }
    val lastRoundAcquired = heldFromStart.getOrElse(0L)
    recordsFlowing = lastRoundAcquired > 0
    if (heldFromStart.contains(0L)) markLastRoundQuiet(lastPlanned)
    val next = availableNow match {
      case Some(target) =>
        val leftBehindMayRelease = slotMovedRecently()
        val taken = takenSoFar()
        val drained = (target.reached(taken) && !leftBehindMayRelease) || (lastRoundAcquired == 0 &&
          heldFromStart.isDefined && checkBacklog(force = true).contains(0L) && backlog.quietForALock)
        if (!drained) Some(true) else if (lastRoundAcquired > 0) Some(false) else None
      case None =>
        if (offeredNothing && lastBacklog.exists(_ <= 0) && triggersBackToBack) waitForBacklogCheck()
        // A run's first round polls whatever the backlog, so that its consumers join the group and
        // Kafka settles their assignment while the topic is idle. Joining when records arrive, the
        // first consumer would be assigned every partition and acquire records of them, then lose
        // some to the others a second or two later; Kafka's client fails the acknowledgements of a
        // partition it no longer has, so those records would come back only when their locks expire.
        if (!offeredAPoll || lastRoundAcquired > 0 || checkBacklog(force = false).forall(_ > 0)) Some(true) else None
    }
    offeredNothing = next.isEmpty
    if (next.contains(true)) offeredAPoll = true
    next
  }

  /** Trigger.AvailableNow: drains the backlog as it is now. */
  def startAvailableNow(): Unit = {
    topics.refresh()
    val target = backlog.refresh(topics.topics)
    logInfo(
      s"Trigger.AvailableNow drains ${target.fold("the records available")(n => s"$n records")} of ${topics.topics}"
    )
    availableNow = Some(AvailableNowTarget(takenSoFar(), target))
  }

  /**
   * What the run has taken: [[KafkaShareSourceMetrics.taken]], less what consumers on executors
   * that are gone held unsettled, which Kafka delivers again ([[LostConsumers]]).
   */
  private def takenSoFar(): Long = counters.taken(countedOutsideTasks()) - lostConsumers.heldRecords()

  /**
   * The backlog a progress report shows, asked of Kafka at most every [[SubscribedTopics.RefreshNanos]]
   * while records flow (a lookup holds the next batch back a few ms), and at once after a round that
   * acquired nothing acknowledged records, so a stream that has caught up reports what is left, 0 at
   * the end of a drain. While the cluster is unreachable it is left out: only planning's lookups count
   * towards `fetchOffset.numRetries`.
   */
  def reportedBacklog(lastPlanned: Option[PlannedRound]): Option[Long] = {
    markLastRoundQuiet(lastPlanned)
    val lastRoundAcquired = lastPlanned.map(_.acquired(counters)).getOrElse(0L)
    if (
      SubscribedTopics.due(backlogChecked, clock.nanoTime()) || (lastRoundAcquired == 0 && counters.acknowledged != acknowledgedAtBacklogCheck)
    ) {
      lastBacklog =
        try lookUpBacklog()
        catch {
          case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.BrokerUnreachable => None
        }
    }
    lastBacklog
  }

  /**
   * Whether a slot's tasks moved to another executor less than [[LeftBehindReleaseNanos]] ago. The
   * consumer left behind RELEASEs what it holds once a task of the query, or the executor's janitor,
   * finds it there; until then its records count as taken, and a drain that ended then would leave
   * them to the group.
   */
  private def slotMovedRecently(): Boolean = {
    val homes = slotLocations.homes
    if (homes.exists { case (slot, home) => seenHomes.get(slot).exists(_ != home) })
      slotMovedAt = Some(clock.nanoTime())
    seenHomes = homes
    slotMovedAt.exists(clock.nanoTime() - _ < LeftBehindReleaseNanos)
  }

  /**
   * After a call that offered nothing, and no backlog seen since, the answer can only change at the
   * next backlog check, so a query without a trigger interval waits for it here rather than have
   * Spark's trigger loop ask every 10 ms, which was most of an idle stream's CPU. Queries with an
   * interval never wait: Spark would report each trigger that waited as falling behind.
   */
  private def waitForBacklogCheck(): Unit = backlogChecked.foreach { checked =>
    val dueInNanos = SubscribedTopics.RefreshNanos - (clock.nanoTime() - checked)
    if (dueInNanos > 0) clock.sleepNanos(dueInNanos)
  }

  /**
   * The group's backlog, asked of Kafka at most every [[SubscribedTopics.RefreshNanos]] unless forced;
   * None (unknown, so a round runs) while the cluster is unreachable.
   */
  private def checkBacklog(force: Boolean): Option[Long] = {
    if (force || SubscribedTopics.due(backlogChecked, clock.nanoTime())) {
      lastBacklog = outage.attempt("reading the group's backlog")(lookUpBacklog()).flatten
    }
    lastBacklog
  }

  /**
   * Tells the backlog, once a round, that the last planned round (its batch ended) acquired nothing,
   * before any lookup that follows it, the progress report's too: the next planning reuses the
   * report's lookup, and a lag Kafka left stale, counted there again, would plan another round.
   * Not a round a consumer joined the group in (the run's first, or one replacing another): its
   * first poll is shorter than the round's timeout, and what the group assigns it may arrive after.
   * Nor one with a slot whose task did not run (foreachBatch need not read its batch): that slot's
   * consumer did not poll, and the records of its partitions wait.
   */
  private def markLastRoundQuiet(lastPlanned: Option[PlannedRound]): Unit =
    lastPlanned.filter(p =>
      p.round != quietRound && p.acquired(counters) == 0 && p.joined(counters) == 0 &&
        everySlotRead(p)
    ).foreach { p =>
      backlog.roundFoundNothing(p.roundStart)
      quietRound = p.round
    }

  private def everySlotRead(round: PlannedRound): Boolean = {
    val reads = slotLocations.value
    round.partitions.indices.forall(slot => reads.get(slot).exists(_.round >= round.round))
  }

  private def lookUpBacklog(): Option[Long] = {
    backlogChecked = Some(clock.nanoTime())
    acknowledgedAtBacklogCheck = counters.acknowledged
    topics.refresh()
    backlog.refresh(topics.topics)
  }
}

private[planning] object RoundPolicy {

  /** How long after a slot moved its consumer left behind may take to release what it holds: two janitor rounds, and a margin. */
  val LeftBehindReleaseNanos: Long = ShareConsumerPool.TidyInterval.multipliedBy(2).plusSeconds(2).toNanos
}

/**
 * What Trigger.AvailableNow must drain: the backlog when it started (None if Kafka could not say,
 * for a group that has not read yet; then the query drains until a round finds nothing).
 */
private[planning] final case class AvailableNowTarget(takenAtStart: Long, records: Option[Long]) {

  /**
   * Counts what the run took ([[KafkaShareSourceMetrics.taken]]): a record released, or whose lock
   * expired before its ACCEPT, went back to the group, and is drained again.
   */
  def reached(taken: Long): Boolean = records.exists(taken - takenAtStart >= _)
}
