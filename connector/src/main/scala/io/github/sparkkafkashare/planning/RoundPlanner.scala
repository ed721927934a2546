package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicReference

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, LoggedRecord, RecordCoordinates, RoundRecordsLog}
import io.github.sparkkafkashare.executor.{AfterLogBudget, KafkaShareInputPartition, KafkaShareReplayPartition, SlotLocations}
import io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics
import io.github.sparkkafkashare.options.{AcceptPoint, AcknowledgmentMode, KafkaShareSourceOptions}
import io.github.sparkkafkashare.planning.Backlog.PartitionAtRoundStart
import org.apache.kafka.clients.consumer.AcknowledgeType
import org.apache.kafka.common.TopicPartition
import org.apache.spark.internal.Logging
import org.apache.spark.sql.connector.read.InputPartition

/**
 * The planning of one query run's rounds, without Spark's session: which round `latestOffset`
 * offers, the input partitions of a round (one per slot, or under `two-phase-commit` a re-run
 * batch's read-back), what a commit and a stop settle, and the explicit marks a commit hands to the
 * next round. [[KafkaShareMicroBatchStream]] answers Spark's calls with it.
 *
 * The run's [[PlanningState]] is held here, in one place. The stream execution thread steps it
 * (`latestOffset`, planning, commit, progress reports, stop), and so does the thread that runs
 * foreachBatch (a Py4J thread for Python) when it plans the running batch's DataFrame again, which
 * finds that round planned. Each step runs under this planner's lock, so its lookups and records-log
 * writes run once and a round is planned once; a read takes the last state whole.
 *
 * @param executors           the task locations of the executors, sorted
 * @param liveExecutors       the task locations of the live executors, the driver's among them
 * @param countedOutsideTasks what executors' janitors counted for the run, which no task reports
 * @param reRunsAfterLog      the batch a run re-runs ran under `after-log` ([[io.github.sparkkafkashare.acknowledgements.CheckpointAcceptPoint]])
 */
private[planning] final class RoundPlanner(
    options: KafkaShareSourceOptions,
    runId: String,
    parallelism: Int,
    admin: GroupAdmin,
    group: GroupFollower,
    counters: KafkaShareSourceMetrics,
    slotLocations: SlotLocations,
    recordsLog: Option[RoundRecordsLog],
    reRunsAfterLog: () => Boolean,
    executors: () => Seq[String],
    liveExecutors: () => Set[String],
    countedOutsideTasks: () => Map[String, Long],
    triggersBackToBack: Boolean,
    clock: NanoClock = NanoClock.System
) extends Logging {
  import RoundPlanner._

  private val state = new AtomicReference(PlanningState.Initial)

  /**
   * Explicit mode: what user code marked, by round. Written by [[recordMarks]] from the thread that
   * runs foreachBatch, read as rounds are planned, committed and stopped: a concurrent map, apart
   * from the planning state, since user code marks while the batch runs and no step waits on it.
   */
  private val marksByRound = new java.util.concurrent.ConcurrentHashMap[Long, AcknowledgementMarks]()

  private val backlog = new Backlog(
    admin,
    ShareConsumerSettings.clientIdPrefix(options.groupId, runId),
    () => TimeUnit.MILLISECONDS.toNanos(group.groupLimits.lockDurationMs),
    clock
  )
  private val outage = new OutageTolerance(admin, options.fetchOffsetNumRetries, options.groupId)
  private val subscribed = new SubscribedTopics(admin, options.subscription, clock)
  private val policy = new RoundPolicy(
    counters,
    backlog,
    outage,
    subscribed,
    slotLocations,
    countedOutsideTasks,
    liveExecutors,
    triggersBackToBack,
    clock
  )

  /** `after-log`: how far each slot's round polls on; a slot's share of `maxRecordsPerTrigger`, if set. */
  private val afterLog = Some(options.acceptPoint).filter(_ == AcceptPoint.AfterLog).map { _ =>
    AfterLogBudget(
      ShareConsumerSettings.slotShareOfTrigger(options, parallelism).getOrElse(AfterLogRoundRecords),
      options.pollTimeoutMs,
      java.time.Duration.ofMillis(FlowingPollTimeoutMs)
    )
  }

  /** Whether slots poll their rounds in parts (`after-log`). */
  def inParts: Boolean = afterLog.isDefined

  /** The run's planning as of its last step. */
  def current: PlanningState = state.get

  /** One step of the run's state, under the lock: `f` may look things up and write the records log. */
  private def step[T](f: PlanningState => (PlanningState, T)): T = synchronized {
    val (next, out) = f(state.get)
    state.set(next)
    out
  }

  /** The round `latestOffset` offers after `startRound`, the last committed one; None for no round yet. */
  def offer(startRound: Long): Option[Long] = step { s =>
    policy.nextRound(s, startRound) match {
      case (next, Some(poll)) => (next.offered(startRound + 1, poll), Some(startRound + 1))
      case (next, None) => (next, None)
    }
  }

  /**
   * The partitions of `round`, after `committedThrough`. Spark may plan one batch more than once
   * (foreachBatch plans the batch DataFrame again): every plan of a round is the same round.
   * `readsEndOffsets`: whether a round that waits the full poll timeout notes its partitions' end
   * offsets (not in real-time mode, which never drains, and whose turnovers wait on the planning).
   */
  def plan(committedThrough: Long, round: Long, readsEndOffsets: Boolean): Array[InputPartition] = step { s =>
    s.planOf(round).fold {
      val (taken, offered) = s.takeOffer(round)
      val planned = planRound(taken, committedThrough, round, offered, readsEndOffsets)
      (taken.planned(planned), planned.partitions)
    }(p => (s, p.partitions))
  }

  /** Real-time mode: the round after `committedThrough`, one partition per slot. */
  def planRealTime(committedThrough: Long): Array[InputPartition] = step { s =>
    val planned = planSlots(s, committedThrough, committedThrough + 1, poll = true, readsEndOffsets = false)
    (s.planned(planned), planned.partitions)
  }

  private def planRound(
      s: PlanningState,
      committedThrough: Long,
      round: Long,
      offered: Option[Boolean],
      readsEndOffsets: Boolean
  ): PlannedRound = {
    if (offered.isEmpty) logInfo(s"Batch of round $round is replayed from the offset log: it does not poll.")
    if (offered.isEmpty && options.exactlyOnceStrategy.replaysLoggedRecords) {
      // The marks of the run that never committed the batch are not this run's: the re-run marks afresh.
      recordsLog.foreach(_.writeReleased(round, Nil))
      PlannedRound(round, counters.acquired.value, counters.joined.value, Map.empty, replayPartitions(round))
    } else {
      if (offered.isEmpty && options.exactlyOnceStrategy.logsRecords) {
        recordsLog.foreach(_.delete(round)) // its records reach no batch now: their redelivery must pass
      }
      planSlots(s, committedThrough, round, offered.getOrElse(false), readsEndOffsets)
    }
  }

  /** One partition per slot: settle what the slot holds, then poll unless `poll` is false. */
  private def planSlots(
      s: PlanningState,
      committedThrough: Long,
      round: Long,
      poll: Boolean,
      readsEndOffsets: Boolean
  ): PlannedRound = {
    if (poll) { // else the round keeps the last list and settings
      outage.attempt("listing the subscribed topics")(subscribed.refresh())
      group.follow(backlog.partitionCount, outage.ongoing)
    }

    // A round lasts as long as its slowest task. While records flow, a slot that finds none has been
    // outpaced by the others (a fetch acquires whole record batches, and the group's lock limit per
    // partition is taken), so waiting rarely brings it records: it should not hold the round long.
    val pollTimeoutMs = if (s.flowing) math.min(options.pollTimeoutMs, FlowingPollTimeoutMs) else options.pollTimeoutMs
    val sorted = executors()
    val known = slotLocations.homes
    val lastRead = slotLocations.value
    val partitions = (0 until parallelism).map { slot =>
      // Stay where the slot's consumer is while that executor lives; otherwise spread slots evenly.
      val location = known.get(slot).filter(sorted.contains)
        .orElse(if (sorted.isEmpty) None else Some(sorted(slot % sorted.size)))
      // The marks of the round the slot holds, which is older than the last committed one if the slot's
      // task did not run since (foreachBatch left part of a batch unread).
      val heldRound = lastRead.get(slot).map(_.round).filter(_ <= committedThrough).getOrElse(committedThrough)
      val partition = KafkaShareInputPartition(
        runId,
        slot,
        round,
        committedThrough,
        marks(heldRound),
        known,
        poll,
        subscribed.topics,
        group.consumerConfig,
        options.includeHeaders,
        pollTimeoutMs,
        group.groupLimits,
        location,
        afterLog
      )
      partition.currentLocation = () => slotLocations.homes.get(slot).filter(executors().contains)
      partition: InputPartition
    }.toArray
    // Only a round that waits the full poll timeout may show that a partition is empty.
    val roundStart = if (poll && !s.flowing && readsEndOffsets) {
      outage.attempt("reading end offsets")(backlog.roundStart()).getOrElse(Map.empty[
        TopicPartition,
        PartitionAtRoundStart
      ])
    } else Map.empty[TopicPartition, PartitionAtRoundStart]
    PlannedRound(round, counters.acquired.value, counters.joined.value, roundStart, partitions)
  }

  /**
   * The records each slot logged for `round` in the run that first ran it, read back by coordinates.
   * At least one partition, even with nothing logged, so that explicit acknowledgements can tell the
   * batch's run from its partitions.
   */
  private def replayPartitions(round: Long): Array[InputPartition] = {
    // After-log: a task of the run that first ran the round may still be polling, with records it ACCEPTs.
    val logged = recordsLog.map { log =>
      if (reRunsAfterLog()) log.sealBatch(round) else log.readBatch(round)
    }.getOrElse(Map.empty)
    logInfo(s"Two-phase commit: round $round is re-run with the ${logged.values.map(_.size).sum} records it logged.")
    val slots = if (logged.isEmpty) Map(0 -> Seq.empty[LoggedRecord]) else logged
    slots.toSeq.sortBy(_._1).map { case (slot, records) =>
      KafkaShareReplayPartition(
        runId,
        round,
        slot,
        records,
        group.consumerConfig,
        options.includeHeaders
      ): InputPartition
    }.toArray
  }

  /**
   * Spark committed the batch that ends at `round`: returns the highest committed round. Slots have
   * settled older rounds' marks, but for a round a slot last read (its records are still held).
   */
  def commit(round: Long): Long = {
    val committed = step { s =>
      val next = s.committed(round)
      (next, next.committedRound)
    }
    val heldRounds = slotLocations.value.values.map(_.round).toSet
    marksByRound.keySet().removeIf(r => r < committed && !heldRounds.contains(r))
    committed
  }

  /**
   * Explicit mode: user code's acknowledgements for records of `round`, applied by the slots when
   * the round is committed. Later marks of the same record replace earlier ones. With a records log,
   * the RELEASEd records are logged before the batch can commit, so that the duplicate check lets
   * them through when the group delivers them again, as the user asked.
   */
  def recordMarks(round: Long, marks: Map[RecordCoordinates, AcknowledgeType]): Unit = {
    val merged = marksByRound.merge(
      round,
      AcknowledgementMarks(round, marks),
      (a, b) => AcknowledgementMarks(round, a.marks ++ b.marks)
    )
    recordsLog.foreach(_.writeReleased(round, merged.marks.collect { case (r, AcknowledgeType.RELEASE) => r }.toSeq))
  }

  /**
   * User code's marks of a committed round. In explicit mode a round without any has empty marks of
   * its own, so that a slot holding an older round can tell it was not sent that round's marks.
   */
  def marks(round: Long): AcknowledgementMarks = Option(marksByRound.get(round)).getOrElse {
    if (options.acknowledgmentMode == AcknowledgmentMode.Explicit && round >= 0) AcknowledgementMarks(round, Map.empty)
    else AcknowledgementMarks.None
  }

  /** Trigger.AvailableNow: drains the backlog as it is now. */
  def startAvailableNow(): Unit = step(s => (policy.startAvailableNow(s), ()))

  /** The backlog a progress report shows ([[RoundPolicy.reportedBacklog]]). */
  def reportedBacklog(): Option[Long] = step(policy.reportedBacklog)

  /**
   * As the run stops: the round its consumers settle as committed, the highest of this run's commits
   * and the query's own record of its offsets (`queryCommitted`), and that round's marks.
   */
  def settledAtStop(queryCommitted: Option[Long]): (Long, AcknowledgementMarks) = {
    val committedThrough = state.get.settledAtStop(queryCommitted)
    (committedThrough, marks(committedThrough))
  }
}

private[planning] object RoundPlanner {

  /** The poll timeout of a round that follows a round that acquired records (see planSlots). */
  val FlowingPollTimeoutMs = 50L

  /**
   * How many records a slot's round takes under `after-log`, unless `maxRecordsPerTrigger` says: a
   * batch holds them in the executor's memory, and Spark's cost per batch is paid once for them.
   */
  val AfterLogRoundRecords = 50000L
}
