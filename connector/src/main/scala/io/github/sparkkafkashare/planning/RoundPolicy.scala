package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.executor.SlotLocations
import io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics
import org.apache.spark.internal.Logging

/**
 * When a run offers Spark another round (`latestOffset`), and what the group's backlog is: the shell
 * around [[PlanningState]]'s pure steps, which makes the lookups they ask for (Kafka's backlog, what
 * the tasks reported, the time) and feeds the answers back. It keeps no state of its own: each call
 * takes the run's state and returns the next.
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

  private val lostConsumers = new LostConsumers(slotLocations, liveExecutors)

  /**
   * The round after `startRound`, the last committed one ([[PlanningState.offer]]). After a call that
   * offered nothing, and no backlog seen since, the answer can only change at the next backlog check,
   * so a query without a trigger interval waits for it here rather than have Spark's trigger loop ask
   * every 10 ms, which would be most of an idle stream's CPU. Queries with an interval never wait: Spark
   * would report each trigger that waited as falling behind.
   */
  def nextRound(state: PlanningState, startRound: Long): (PlanningState, Option[Boolean]) = {
    val acquired = state.acquiredFrom(startRound, roundCounts())
    val told = if (acquired.contains(0L)) tellQuiet(state) else state
    val (seenBy, seen) = told.availableNow match {
      case Some(_) =>
        val homesSeen = told.sawHomes(slotLocations.homes, clock.nanoTime())
        (homesSeen, OfferSeen(clock.nanoTime(), acquired, takenSoFar(), homesSeen.slotMovedRecently(clock.nanoTime())))
      case None =>
        val wait = told.waitBeforeOffer(clock.nanoTime(), triggersBackToBack)
        if (wait > 0) clock.sleepNanos(wait)
        (told, OfferSeen(clock.nanoTime(), acquired))
    }
    val looked = seenBy.lookupBeforeOffer(seen).fold(seenBy) { _ =>
      seenBy.checked(lookUpBacklog(lookUp => outage.attempt("reading the group's backlog")(lookUp()).flatten))
    }
    looked.offer(seen.copy(quietForALock = backlog.quietForALock))
  }

  /** Trigger.AvailableNow: drains the backlog as it is now. */
  def startAvailableNow(state: PlanningState): PlanningState = {
    topics.refresh()
    val target = backlog.refresh(topics.topics)
    logInfo(
      s"Trigger.AvailableNow drains ${target.fold("the records available")(n => s"$n records")} of ${topics.topics}"
    )
    state.copy(availableNow = Some(AvailableNowTarget(takenSoFar(), target)))
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
  def reportedBacklog(state: PlanningState): (PlanningState, Option[Long]) = {
    val told = tellQuiet(state)
    val counts = roundCounts()
    val lastRoundAcquired = told.lastPlanned.map(counts.acquired).getOrElse(0L)
    val next = if (!told.reportNeedsLookup(clock.nanoTime(), lastRoundAcquired, counters.acknowledged)) told
    else told.checked(lookUpBacklog { lookUp =>
      try lookUp()
      catch { case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.BrokerUnreachable => None }
    })
    (next, next.backlog)
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
  private def tellQuiet(state: PlanningState): PlanningState =
    state.roundToTellQuiet(roundCounts()).fold(state) { p =>
      backlog.roundFoundNothing(p.roundStart)
      state.toldQuiet(p.round)
    }

  private def roundCounts(): RoundCounts =
    RoundCounts(counters.acquired.value, counters.joined.value, slotLocations.value.map { case (s, r) => s -> r.round })

  /** Looks the group's backlog up, through `guarded` (how a failure to reach the cluster is taken). */
  private def lookUpBacklog(guarded: (() => Option[Long]) => Option[Long]): BacklogCheck = {
    val at = clock.nanoTime()
    val acknowledged = counters.acknowledged
    BacklogCheck(at, acknowledged, guarded { () => topics.refresh(); backlog.refresh(topics.topics) })
  }
}
