package io.github.sparkkafkashare.planning

import java.util.{Optional, UUID}
import java.util.concurrent.TimeUnit

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, DeliveredRecordsIndex, LoggedRecord, RecordCoordinates, RoundRecordsLog}
import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.executor.{GroupLimits, KafkaShareInputPartition, KafkaSharePartitionReaderFactory, KafkaShareReplayPartition, ShareConsumerPool, SlotLocations}
import io.github.sparkkafkashare.metrics.{KafkaShareCountMetric, KafkaShareSourceMetrics}
import io.github.sparkkafkashare.offsets.KafkaShareSourceOffset
import io.github.sparkkafkashare.options.{AcknowledgmentMode, ConflictingSparkSetting, KafkaShareSourceOptions}
import io.github.sparkkafkashare.planning.Backlog.PartitionAtRoundStart
import org.apache.hadoop.fs.Path
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerConfig}
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.kafkashare.{ExecutorLocality, QueryRunRegistry, RunState, RunningStreamingQuery}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming.{MicroBatchStream, Offset, ReadLimit, ReportsSourceMetrics, SupportsTriggerAvailableNow}
import org.apache.spark.util.SerializableConfiguration

/**
 * Plans the micro-batches of one run of a kafka-share query on the driver.
 *
 * Each batch is a round in which every slot's share consumer first settles the records it holds
 * (ACCEPT those of committed batches, RELEASE the rest) and then polls once. Spark commits a batch
 * before it plans the next, so a batch's start offset names the last committed round; this is how
 * the commit reaches the consumers that hold the records, through public API only.
 *
 * Because the acknowledgement of a batch rides on the next batch, a batch whose round acquired
 * records is always followed by another one, even if the topic is idle: otherwise the records
 * would sit acquired until their locks expired and come back.
 *
 * A batch that Spark replays from its offset log after a restart polls nothing: the records the
 * first attempt read are still locked by consumers that died with it and come back when their
 * locks expire, while a sink that had already committed that batch id would skip any new ones.
 */
private[sparkkafkashare] final class KafkaShareMicroBatchStream(
    val options: KafkaShareSourceOptions,
    checkpointLocation: String,
    session: SparkSession)
  extends MicroBatchStream with SupportsTriggerAvailableNow with ReportsSourceMetrics with Logging {

  import KafkaShareMicroBatchStream._

  /** Names this run's consumers on the executors; a restarted query gets new ones. */
  private val runId = UUID.randomUUID().toString
  private val parallelism = options.parallelism.getOrElse(session.sparkContext.defaultParallelism)
  /** The query this stream runs in: Spark creates a query's streams on its stream thread. */
  private val query = RunningStreamingQuery.of(session)
  options.exactlyOnceStrategy.refuseConflicting(
    ConflictingSparkSetting.asyncProgressTracking(query.exists(_.tracksProgressAsynchronously)))
  private val admin = new ShareGroupAdmin(options.connection)
  /**
   * The group's limits (lock renewal allowed, lock limit per partition, lock duration) as this run
   * last read them, and what [[consumerConfig]] was worked out for (see [[followGroup]]).
   */
  private var (groupLimits, pollSizeBasis) = try {
    admin.checkShareGroupsEnabled()
    val subscribed = admin.partitionsOf(admin.subscribedTopics(options.subscription))
    val limits = admin.configureGroup(options, subscribed)
    (limits, PollSizeBasis(subscribed.size, limits.recordLocksPerPartition))
  } catch { case NonFatal(e) => admin.close(); throw e }
  /** The settings of this run's share consumers: their poll sizes depend on [[pollSizeBasis]]. */
  private var consumerConfig = consumerSettings(pollSizeBasis)
  /** When the group's limits were last read (see [[followGroup]]). */
  private var groupLimitsChecked = System.nanoTime()
  if (!groupLimits.renewAllowed) warnRenewalRefused()

  runs.put(runId, this)
  private val counters = KafkaShareSourceMetrics.register(session.sparkContext, options.groupId)
  private val slotLocations = new SlotLocations()
  session.sparkContext.register(slotLocations, s"kafka-share[${options.groupId}].slotLocations")
  QueryRunRegistry.publish(runId, RunState(committedThrough = -1L, homes = Map.empty))

  private val backlog = new Backlog(admin, ShareConsumerSettings.clientIdPrefix(options.groupId, runId),
    () => TimeUnit.MILLISECONDS.toNanos(groupLimits.lockDurationMs))
  private val outage = new OutageTolerance(admin, options.fetchOffsetNumRetries, options.groupId)
  /** `checkpoint-dedup` and `two-phase-commit`: the records each round handed to Spark. */
  private val recordsLog = if (!options.exactlyOnceStrategy.logsRecords) None else {
    Some(new RoundRecordsLog(new Path(checkpointLocation, "kafka-share-rounds").toString,
      new SerializableConfiguration(session.sessionState.newHadoopConf())))
  }
  private var dedupState: Option[Long] = None
  private var dedupPruned: Option[Long] = None

  // State below is touched by the query's stream execution thread, and by planInputPartitions when
  // foreachBatch's thread plans the running batch's DataFrame again (it finds that round planned).
  /** Rounds this run offered in latestOffset, and whether their tasks may poll. */
  private val offeredRounds = scala.collection.mutable.Map.empty[Long, Boolean]
  private var lastPlanned: Option[PlannedRound] = None
  private var committedRound = -1L
  private var topics: Set[String] = Set.empty
  /** The ids of [[topics]], as the backlog last described them: a topic deleted and made again under its name gets another. */
  private var topicIds: Map[String, String] = Map.empty
  private var topicsChecked: Option[Long] = None
  private var lastBacklog: Option[Long] = None
  private var backlogChecked: Option[Long] = None
  /** [[KafkaShareSourceMetrics.acknowledged]] when the backlog was last asked for. */
  private var acknowledgedAtBacklogCheck = 0L
  /** The last round [[markLastRoundQuiet]] told the backlog of. */
  private var quietRound = -1L
  /** The last round acquired records: a consumer that finds none now is outpaced, not idle. */
  private var recordsFlowing = false
  /** The last latestOffset offered no round. */
  private var offeredNothing = false
  /** This run has offered a round that polls: its consumers have joined the group. */
  private var offeredAPoll = false
  /** Spark asks again 10 ms after a trigger that ran no batch (its default trigger). */
  private val triggersBackToBack = query.exists(_.runsBackToBack)
  /** Per slot, its home when [[slotMovedRecently]] last looked, and when a slot last moved. */
  private var seenHomes = Map.empty[Int, String]
  private var slotMovedAt: Option[Long] = None
  /** Set by Trigger.AvailableNow: the records to drain, counted from the acquired counter at its start. */
  private var availableNow: Option[AvailableNowTarget] = None
  /** The counters [[warnOfRedeliveries]] has warned of. */
  private var warnedOf = Set.empty[KafkaShareCountMetric]
  /**
   * Explicit mode: what user code marked, by round. Written by [[recordMarks]] from the thread that
   * runs foreachBatch (a Py4J thread for Python), read when the next round is planned.
   */
  private val marksByRound = new java.util.concurrent.ConcurrentHashMap[Long, AcknowledgementMarks]()

  override def initialOffset(): Offset = KafkaShareSourceOffset.Initial

  override def deserializeOffset(json: String): Offset = KafkaShareSourceOffset.fromJson(json)

  override def latestOffset(): Offset =
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is used instead")

  override def latestOffset(start: Offset, limit: ReadLimit): Offset = {
    val startRound = KafkaShareSourceOffset(start).round
    val heldFromStart = lastPlanned.collect { case p if p.round == startRound => acquiredBy(p) }
    val lastRoundAcquired = heldFromStart.getOrElse(0L)
    warnOfRedeliveries()
    recordsFlowing = lastRoundAcquired > 0
    if (heldFromStart.contains(0L)) markLastRoundQuiet()
    val next = availableNow match {
      case Some(target) =>
        val leftBehindMayRelease = slotMovedRecently()
        val taken = counters.taken(QueryRunRegistry.countedOutsideTasks(runId))
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
    next match {
      case Some(poll) =>
        offeredRounds(startRound + 1) = poll
        KafkaShareSourceOffset(startRound + 1)
      case None => start
    }
  }

  /**
   * Whether a slot's tasks moved to another executor less than [[LeftBehindReleaseNanos]] ago. The
   * consumer left behind RELEASEs what it holds once a task of the query, or the executor's janitor,
   * finds it there; until then its records count as taken, and a drain that ended then would leave
   * them to the group.
   */
  private def slotMovedRecently(): Boolean = {
    val homes = slotLocations.homes
    if (homes.exists { case (slot, home) => seenHomes.get(slot).exists(_ != home) }) slotMovedAt = Some(System.nanoTime())
    seenHomes = homes
    slotMovedAt.exists(System.nanoTime() - _ < LeftBehindReleaseNanos)
  }

  /**
   * After a call that offered nothing, and no backlog seen since, the answer can only change at the
   * next backlog check, so a query without a trigger interval waits for it here rather than have
   * Spark's trigger loop ask every 10 ms, which was most of an idle stream's CPU. Queries with an
   * interval never wait: Spark would report each trigger that waited as falling behind.
   */
  private def waitForBacklogCheck(): Unit = backlogChecked.foreach { checked =>
    val dueInNanos = MetadataRefreshNanos - (System.nanoTime() - checked)
    if (dueInNanos > 0) TimeUnit.NANOSECONDS.sleep(dueInNanos)
  }

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] = {
    val round = KafkaShareSourceOffset(end).round
    // Spark may plan one batch more than once (foreachBatch plans the batch DataFrame again):
    // every plan of a round must be the same round.
    lastPlanned.filter(_.round == round).map(_.partitions).getOrElse {
      val planned = planRound(KafkaShareSourceOffset(start).round, round)
      lastPlanned = Some(planned)
      planned.partitions
    }
  }

  private def planRound(committedThrough: Long, round: Long): PlannedRound = {
    val offered = offeredRounds.remove(round)
    val poll = offered.getOrElse(false)
    if (offered.isEmpty) logInfo(s"Batch of round $round is replayed from the offset log: it does not poll.")
    if (offered.isEmpty && options.exactlyOnceStrategy.replaysLoggedRecords) {
      // The marks of the run that never committed the batch are not this run's: the re-run marks afresh.
      recordsLog.foreach(_.writeReleased(round, Nil))
      PlannedRound(round, counters.acquired.value, counters.joined.value, Map.empty, replayPartitions(round))
    } else {
      if (offered.isEmpty && options.exactlyOnceStrategy.logsRecords) {
        recordsLog.foreach(_.delete(round)) // its records reach no batch now: their redelivery must pass
      }
      planSlots(committedThrough, round, poll)
    }
  }

  /** One partition per slot: settle what the slot holds, then poll unless `poll` is false. */
  private def planSlots(committedThrough: Long, round: Long, poll: Boolean): PlannedRound = {
    if (poll) { // else the round keeps the last list and settings
      outage.attempt("listing the subscribed topics")(refreshTopics())
      followGroup()
    }

    // A round lasts as long as its slowest task. While records flow, a slot that finds none has been
    // outpaced by the others (a fetch acquires whole record batches, and the group's lock limit per
    // partition is taken), so waiting rarely brings it records: it should not hold the round long.
    val pollTimeoutMs = if (recordsFlowing) math.min(options.pollTimeoutMs, FlowingPollTimeoutMs) else options.pollTimeoutMs
    val executors = ExecutorLocality.sortedExecutors()
    val known = slotLocations.homes
    val lastRead = slotLocations.value
    val partitions = (0 until parallelism).map { slot =>
      // Stay where the slot's consumer is while that executor lives; otherwise spread slots evenly.
      val location = known.get(slot).filter(executors.contains)
        .orElse(if (executors.isEmpty) None else Some(executors(slot % executors.size)))
      // The marks of the round the slot holds, which is older than the last committed one if the slot's
      // task did not run since (foreachBatch left part of a batch unread).
      val heldRound = lastRead.get(slot).map(_.round).filter(_ <= committedThrough).getOrElse(committedThrough)
      val partition = KafkaShareInputPartition(runId, slot, round, committedThrough, marks(heldRound),
        known, poll, topics, topicIds, consumerConfig, options.includeHeaders, pollTimeoutMs, groupLimits, location)
      partition.currentLocation = () => slotLocations.homes.get(slot).filter(ExecutorLocality.sortedExecutors().contains)
      partition: InputPartition
    }.toArray
    // Only a round that waits the full poll timeout may show that a partition is empty.
    val roundStart = if (poll && !recordsFlowing) {
      outage.attempt("reading end offsets")(backlog.roundStart()).getOrElse(Map.empty[TopicPartition, PartitionAtRoundStart])
    } else Map.empty[TopicPartition, PartitionAtRoundStart]
    PlannedRound(round, counters.acquired.value, counters.joined.value, roundStart, partitions)
  }

  /**
   * The records each slot logged for `round` in the run that first ran it, read back by coordinates.
   * At least one partition, even with nothing logged, so that explicit acknowledgements can tell the
   * batch's run from its partitions.
   */
  private def replayPartitions(round: Long): Array[InputPartition] = {
    val logged = recordsLog.map(_.read(round)).getOrElse(Map.empty)
    logInfo(s"Two-phase commit: round $round is re-run with the ${logged.values.map(_.size).sum} records it logged.")
    val slots = if (logged.isEmpty) Map(0 -> Seq.empty[LoggedRecord]) else logged
    slots.toSeq.sortBy(_._1).map { case (slot, records) =>
      KafkaShareReplayPartition(runId, round, slot, records, consumerConfig, options.includeHeaders): InputPartition
    }.toArray
  }

  override def createReaderFactory(): PartitionReaderFactory =
    KafkaSharePartitionReaderFactory(counters, slotLocations, recordsLog)

  override def commit(end: Offset): Unit = {
    committedRound = math.max(committedRound, KafkaShareSourceOffset(end).round)
    // Slots have settled older rounds, but for a round a slot last read (its records are still held).
    val heldRounds = slotLocations.value.values.map(_.round).toSet
    marksByRound.keySet().removeIf(r => r < committedRound && !heldRounds.contains(r))
    QueryRunRegistry.publish(runId, RunState(committedRound, slotLocations.homes))
    pruneRecordsLog()
  }

  /**
   * Forgets logged records that lie below their share-partition's start offset, or whose topic was
   * made again (Kafka never delivers those again), at most every [[RecordsLogPruneNanos]]; keeps the remembered count.
   */
  private def pruneRecordsLog(): Unit = recordsLog.foreach { log =>
    if (dedupPruned.forall(System.nanoTime() - _ > RecordsLogPruneNanos)) {
      dedupPruned = Some(System.nanoTime())
      try {
        val startOffsets = admin.partitionStates().map { case (tp, s) => tp -> s.startOffset() }
        dedupState = Some(log.prune(committedRound, startOffsets, topicIds))
      }
      catch { case NonFatal(e) => logWarning(s"Could not prune the records log in ${log.dir}", e) }
    }
  }

  /**
   * Explicit mode: user code's acknowledgements for records of `round`, applied by the slots when
   * the round is committed. Later marks of the same record replace earlier ones. With a records log,
   * the RELEASEd records are logged before the batch can commit, so that the duplicate check lets
   * them through when the group delivers them again, as the user asked.
   */
  def recordMarks(round: Long, marks: Map[RecordCoordinates, AcknowledgeType]): Unit = {
    val merged = marksByRound.merge(round, AcknowledgementMarks(round, marks), (a, b) => AcknowledgementMarks(round, a.marks ++ b.marks))
    recordsLog.foreach(_.writeReleased(round, merged.marks.collect { case (r, AcknowledgeType.RELEASE) => r }.toSeq))
  }

  /**
   * User code's marks of a committed round. In explicit mode a round without any has empty marks of
   * its own, so that a slot holding an older round can tell it was not sent that round's marks.
   */
  private def marks(round: Long): AcknowledgementMarks = Option(marksByRound.get(round)).getOrElse {
    if (options.acknowledgmentMode == AcknowledgmentMode.Explicit && round >= 0) AcknowledgementMarks(round, Map.empty)
    else AcknowledgementMarks.None
  }

  /**
   * The query learns, once for each cause, that the group will deliver records of committed batches
   * again: their locks expired, or their acknowledgements were not applied.
   */
  private def warnOfRedeliveries(): Unit = {
    val totals = counters.totals(QueryRunRegistry.countedOutsideTasks(runId))
    def once(metric: KafkaShareCountMetric)(what: String, advice: String): Unit =
      if (totals(metric) > 0 && !warnedOf(metric)) {
        warnedOf += metric
        logWarning(s"Share group '${options.groupId}': ${totals(metric)} records $what, so the group will deliver " +
          s"them again (duplicates unless the exactly-once strategy drops them). $advice Metric '${metric.name}' " +
          "counts them.")
      }
    once(KafkaShareCountMetric.LocksExpired)(
      "lost their acquisition lock before they were acknowledged",
      "Renewal could not keep them: check that the group allows lock renewal (share.renew.acknowledge.enable), " +
        s"raise option '${KafkaShareSourceOptions.LockTimeoutMs}', or make batches shorter.")
    once(KafkaShareCountMetric.AcknowledgementsFailed)(
      "could not be acknowledged (the acknowledgement was not applied)",
      "Most often their consumer lost the partition as the group's members changed (consumers joining or " +
        "leaving); the executors' logs name the partitions and the error.")
  }

  override def prepareForTriggerAvailableNow(): Unit = {
    refreshTopics()
    val target = backlog.refresh(topics)
    logInfo(s"Trigger.AvailableNow drains ${target.fold("the records available")(n => s"$n records")} of $topics")
    availableNow = Some(AvailableNowTarget(counters.taken(QueryRunRegistry.countedOutsideTasks(runId)), target))
  }

  override def metrics(latestConsumedOffset: Optional[Offset]): java.util.Map[String, String] =
    (counters.report(reportedBacklog(), dedupState, QueryRunRegistry.countedOutsideTasks(runId)) +
      ("consumers" -> parallelism.toString)).asJava

  /**
   * Settles what the consumers hold (ACCEPT for batches the query committed, RELEASE for the rest)
   * and closes them, so the group redelivers nothing that this query committed.
   */
  override def stop(): Unit = {
    // Spark commits a source's offsets only once it starts the next batch (with async progress tracking,
    // once the offset log of a later batch is written), so the query's own record has the last batch.
    val committedThrough = query.flatMap(_.committedOffset(this)).map(KafkaShareSourceOffset(_).round)
      .fold(committedRound)(math.max(committedRound, _))
    runs.remove(runId)
    DeliveredRecordsIndex.forget(runId)
    val (homes, lastMarks) = (slotLocations.homes, marks(committedThrough))
    try ConsumerCloser.closeRun(session, runId, homes, committedThrough, lastMarks)
    finally {
      // After the closer: until then, executors' janitors see the run as running.
      QueryRunRegistry.markStopped(runId, RunState(committedThrough, homes), lastMarks.plain)
      admin.close()
    }
  }

  private def consumerSettings(basis: PollSizeBasis): Map[String, String] = {
    val PollSizeBasis(partitions, recordLocks) = basis
    val settings = ShareConsumerSettings(options, parallelism, runId, partitions, recordLocks)
    val shared = ShareConsumerSettings.sharedPartitionCap(options, parallelism, partitions, recordLocks).isDefined
    logInfo(s"$parallelism consumers of share group '${options.groupId}' on $partitions partitions " +
      s"($recordLocks records in flight per partition) each poll up to " +
      s"${settings(ConsumerConfig.MAX_POLL_RECORDS_CONFIG)} records per batch" + (if (!shared) "." else
        ", strictly: their even share of the lock limit. Set 'kafka.max.poll.records' or " +
        "'kafka.share.acquire.mode' to choose otherwise."))
    settings
  }

  /**
   * Follows what operators change while the query runs (with `kafka-configs`, say). The group's
   * limits are read again every [[Backlog.PartitionsRefreshNanos]]: the slots take lock renewal and
   * the lock duration from each round. The consumers' settings are worked out again when the
   * subscribed topics, as the backlog last described them, have another number of partitions (a
   * topic grew, or a pattern matched one more), or the lock limit changed: poll sizes follow the
   * partitions each consumer has, or shares, and their locks. A slot's next task that polls replaces
   * its consumer when the settings differ, so this changes nothing unless the poll sizes do.
   */
  private def followGroup(): Unit = {
    val now = System.nanoTime()
    // Not read while the cluster is unreachable, nor counted as a failed lookup: the last limits serve.
    if (!outage.ongoing && now - groupLimitsChecked >= Backlog.PartitionsRefreshNanos) {
      groupLimitsChecked = now
      try followLimits(admin.groupLimits()) catch {
        case NonFatal(e) => logDebug(s"Reading the configs of share group '${options.groupId}' failed; keeping the last", e)
      }
    }
    val basis = PollSizeBasis(backlog.partitionCount.getOrElse(pollSizeBasis.partitions), groupLimits.recordLocksPerPartition)
    if (basis != pollSizeBasis) {
      logInfo(s"Share group '${options.groupId}': the subscribed topics have ${basis.partitions} partitions and " +
        s"${basis.recordLocks} records in flight per partition, where they had ${pollSizeBasis.partitions} and " +
        s"${pollSizeBasis.recordLocks}.")
      pollSizeBasis = basis
      consumerConfig = consumerSettings(basis)
    }
  }

  private def followLimits(current: GroupLimits): Unit = {
    if (current.renewAllowed != groupLimits.renewAllowed) {
      if (current.renewAllowed) logInfo(s"Share group '${options.groupId}' now allows lock renewal: the slots renew from the next round.")
      else warnRenewalRefused()
    }
    if (current.lockDurationMs != groupLimits.lockDurationMs) {
      logInfo(s"Share group '${options.groupId}': records are locked for ${current.lockDurationMs} ms, where they were " +
        s"for ${groupLimits.lockDurationMs} ms.")
    }
    groupLimits = current
  }

  private def warnRenewalRefused(): Unit =
    logWarning(s"Share group '${options.groupId}' does not allow lock renewal (${ShareGroupAdmin.RenewAllowedConfig}" +
      "=false): records of a batch that runs longer than the acquisition lock will be delivered again.")

  private def refreshTopics(): Unit = if (due(topicsChecked)) {
    topics = admin.subscribedTopics(options.subscription)
    topicIds = backlog.topicIds(topics)
    topicsChecked = Some(System.nanoTime())
  }

  private def due(lastChecked: Option[Long]): Boolean = lastChecked.forall(System.nanoTime() - _ > MetadataRefreshNanos)

  /**
   * The group's backlog, asked of Kafka at most every [[MetadataRefreshNanos]] unless forced; None
   * (unknown, so a round runs) while the cluster is unreachable.
   */
  private def checkBacklog(force: Boolean): Option[Long] = {
    if (force || due(backlogChecked)) lastBacklog = outage.attempt("reading the group's backlog")(lookUpBacklog()).flatten
    lastBacklog
  }

  /**
   * The backlog a progress report shows, asked of Kafka at most every [[MetadataRefreshNanos]] while
   * records flow (a lookup holds the next batch back a few ms), and at once after a round that
   * acquired nothing acknowledged records, so a stream that has caught up reports what is left, 0 at
   * the end of a drain. While the cluster is unreachable it is left out: only planning's lookups count
   * towards `fetchOffset.numRetries`.
   */
  private def reportedBacklog(): Option[Long] = {
    markLastRoundQuiet()
    val lastRoundAcquired = lastPlanned.map(acquiredBy).getOrElse(0L)
    if (due(backlogChecked) || (lastRoundAcquired == 0 && counters.acknowledged != acknowledgedAtBacklogCheck)) {
      lastBacklog = try lookUpBacklog() catch {
        case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.BrokerUnreachable => None
      }
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
  private def markLastRoundQuiet(): Unit =
    lastPlanned.filter(p => p.round != quietRound && acquiredBy(p) == 0 && joinedIn(p) == 0 && everySlotRead(p)).foreach { p =>
      backlog.roundFoundNothing(p.roundStart)
      quietRound = p.round
    }

  private def everySlotRead(round: PlannedRound): Boolean = {
    val reads = slotLocations.value
    round.partitions.indices.forall(slot => reads.get(slot).exists(_.round >= round.round))
  }

  /** The records a planned round's tasks have acquired so far. */
  private def acquiredBy(round: PlannedRound): Long = counters.acquired.value - round.acquiredBefore

  /** The consumers that joined the group in a planned round's tasks. */
  private def joinedIn(round: PlannedRound): Long = counters.joined.value - round.joinedBefore

  private def lookUpBacklog(): Option[Long] = {
    backlogChecked = Some(System.nanoTime())
    acknowledgedAtBacklogCheck = counters.acknowledged
    refreshTopics()
    backlog.refresh(topics)
  }
}

private[sparkkafkashare] object KafkaShareMicroBatchStream {
  /** The poll timeout of a round that follows a round that acquired records (see planSlots). */
  val FlowingPollTimeoutMs = 50L
  val RecordsLogPruneNanos: Long = TimeUnit.SECONDS.toNanos(10)
  /** How long after a slot moved its consumer left behind may take to release what it holds: two janitor rounds, and a margin. */
  val LeftBehindReleaseNanos: Long = ShareConsumerPool.TidyInterval.multipliedBy(2).plusSeconds(2).toNanos
  /** How often topics matching a pattern and the backlog are asked of Kafka. */
  val MetadataRefreshNanos: Long = TimeUnit.MILLISECONDS.toNanos(500)

  /** The streams of the query runs in this driver, by run id: how explicit acknowledgements find theirs. */
  private val runs = new java.util.concurrent.ConcurrentHashMap[String, KafkaShareMicroBatchStream]()

  def running(runId: String): Option[KafkaShareMicroBatchStream] = Option(runs.get(runId))
}

/** What the consumers' poll sizes are worked out from: the subscribed partitions and the group's lock limit per partition. */
private final case class PollSizeBasis(partitions: Int, recordLocks: Int)

/**
 * A planned round, with the acquired-records and joined-consumers counters before it ran and what
 * [[Backlog]] noted as it began.
 */
private final case class PlannedRound(
    round: Long,
    acquiredBefore: Long,
    joinedBefore: Long,
    roundStart: Map[TopicPartition, PartitionAtRoundStart],
    partitions: Array[InputPartition])

/**
 * What Trigger.AvailableNow must drain: the backlog when it started (None if Kafka could not say,
 * for a group that has not read yet; then the query drains until a round finds nothing).
 */
private[sparkkafkashare] final case class AvailableNowTarget(takenAtStart: Long, records: Option[Long]) {
  /**
   * Counts what the run took ([[KafkaShareSourceMetrics.taken]]): a record released, or whose lock
   * expired before its ACCEPT, went back to the group, and is drained again.
   */
  def reached(taken: Long): Boolean = records.exists(taken - takenAtStart >= _)
}
