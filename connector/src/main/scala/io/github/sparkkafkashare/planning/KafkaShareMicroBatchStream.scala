package io.github.sparkkafkashare.planning

import java.util.{Optional, UUID}
import java.util.concurrent.TimeUnit

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.github.sparkkafkashare
  .acknowledgements.{AcknowledgementMarks, CheckpointAcceptPoint, DeliveredRecordsIndex, LoggedRecord, RecordCoordinates, RoundRecordsLog}
import io.github.sparkkafkashare.executor.{AfterLogBudget, KafkaShareInputPartition, KafkaSharePartitionReaderFactory, KafkaShareReplayPartition, SlotLocations}
import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, RedeliveryWarnings}
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.offsets.{KafkaShareRoundEnd, KafkaShareSourceOffset}
import io.github.sparkkafkashare.options.{AcceptPoint, AcknowledgmentMode, ConflictingSparkSetting, KafkaShareSourceOptions}
import io.github.sparkkafkashare.planning.Backlog.PartitionAtRoundStart
import io.github.sparkkafkashare.runs.RunState
import org.apache.hadoop.fs.Path
import org.apache.kafka.clients.consumer.AcknowledgeType
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.kafkashare.{ExecutorLocality, QueryRunRegistry, RunningStreamingQuery}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.connector.read
  .streaming.{MicroBatchStream, Offset, PartitionOffset, ReadLimit, ReportsSourceMetrics, SupportsTriggerAvailableNow}
import org.apache.spark.util.SerializableConfiguration

/**
 * Plans the micro-batches of one run of a kafka-share query on the driver.
 *
 * Each batch is a round in which every slot's share consumer first settles the records it holds
 * (ACCEPT those of committed batches, RELEASE the rest) and then polls once. Spark commits a batch
 * before it plans the next, so a batch's start offset names the last committed round; this is how
 * the commit reaches the consumers that hold the records, through public API only.
 *
 * When a round is offered is [[RoundPolicy]]'s to say; the group's limits and the consumers'
 * settings are [[GroupFollower]]'s to follow. This class keeps Spark's role: offsets, planning a
 * round's partitions, commit, and the explicit marks that a commit hands to the next round.
 *
 * A batch that Spark replays from its offset log after a restart polls nothing: the records the
 * first attempt read are still locked by consumers that died with it and come back when their
 * locks expire, while a sink that had already committed that batch id would skip any new ones.
 *
 * In real-time mode (Spark 4.1 and later: [[KafkaShareRealTimeStream]] declares it) a batch is a
 * round too, planned from its start offset alone, whose tasks acknowledge their records themselves
 * ([[RealTimeMode]]); its end offset is the round its tasks report.
 */
private[sparkkafkashare] class KafkaShareMicroBatchStream(
    val options: KafkaShareSourceOptions,
    checkpointLocation: String,
    session: SparkSession
) extends MicroBatchStream with SupportsTriggerAvailableNow with ReportsSourceMetrics with Logging {

  import KafkaShareMicroBatchStream._

  /** Names this run's consumers on the executors; a restarted query gets new ones. */
  private val runId = UUID.randomUUID().toString
  private val parallelism = options.parallelism.getOrElse(session.sparkContext.defaultParallelism)

  /** The query this stream runs in: Spark creates a query's streams on its stream thread. */
  private val query = RunningStreamingQuery.of(session)
  // Before the strategy's own checks: real-time mode turns on async progress tracking by itself.
  if (query.exists(_.runsInRealTime)) RealTimeMode.refuseOptions(options)
  options.exactlyOnceStrategy.refuseConflicting(
    ConflictingSparkSetting.asyncProgressTracking(query.exists(_.tracksProgressAsynchronously))
  )
  private val hadoopConf = session.sessionState.newHadoopConf()
  private val checkpointAcceptPoint =
    new CheckpointAcceptPoint(checkpointLocation, hadoopConf, options.acceptPoint, options.exactlyOnceStrategy)

  /** `checkpoint-dedup` and `two-phase-commit`: the records each round handed to Spark. */
  private val recordsLog = if (!options.exactlyOnceStrategy.logsRecords) None
  else {
    val log = new RoundRecordsLog(
      new Path(checkpointLocation, "kafka-share-rounds").toString,
      new SerializableConfiguration(hadoopConf),
      options.allowNonAtomicCreate
    )
    log.refuseNonAtomicCreate(options.exactlyOnceStrategy.name)
    Some(log)
  }
  private val admin = new ShareGroupAdmin(options.connection)
  private val group =
    try new GroupFollower(admin, options, parallelism, runId)
    catch {
      case NonFatal(e) => admin.close(); throw e
    }

  runs.put(runId, this)
  private[planning] val counters = KafkaShareSourceMetrics.register(session.sparkContext, options.groupId)
  private[planning] val slotLocations = new SlotLocations()
  session.sparkContext.register(slotLocations, s"kafka-share[${options.groupId}].slotLocations")
  QueryRunRegistry.publish(runId, RunState(committedThrough = -1L, homes = Map.empty))

  private val backlog = new Backlog(
    admin,
    ShareConsumerSettings.clientIdPrefix(options.groupId, runId),
    () => TimeUnit.MILLISECONDS.toNanos(group.groupLimits.lockDurationMs)
  )
  private val outage = new OutageTolerance(admin, options.fetchOffsetNumRetries, options.groupId)
  private val subscribed = new SubscribedTopics(admin, options.subscription)
  private val policy = new RoundPolicy(
    counters,
    backlog,
    outage,
    subscribed,
    slotLocations,
    () => QueryRunRegistry.countedOutsideTasks(runId),
    () => ExecutorLocality.sortedExecutors().toSet + ExecutorLocality.currentExecutor(),
    triggersBackToBack = query.exists(_.runsBackToBack)
  )
  private val redeliveryWarnings = new RedeliveryWarnings(options.groupId, KafkaShareSourceOptions.LockTimeoutMs)

  /** `after-log`: how far each slot's round polls on; a slot's share of `maxRecordsPerTrigger`, if set. */
  private val afterLog = Some(options.acceptPoint).filter(_ == AcceptPoint.AfterLog).map { _ =>
    AfterLogBudget(
      ShareConsumerSettings.slotShareOfTrigger(options, parallelism).getOrElse(AfterLogRoundRecords),
      options.pollTimeoutMs,
      java.time.Duration.ofMillis(FlowingPollTimeoutMs)
    )
  }
  private var dedupState: Option[Long] = None
  private var dedupPruned: Option[Long] = None

  // State below is touched by the query's stream execution thread, and by planInputPartitions when
  // foreachBatch's thread plans the running batch's DataFrame again (it finds that round planned).
  /** Rounds this run offered in latestOffset, and whether their tasks may poll. */
  private val offeredRounds = scala.collection.mutable.Map.empty[Long, Boolean]
  private var lastPlanned: Option[PlannedRound] = None
  private var committedRound = -1L

  /**
   * Explicit mode: what user code marked, by round. Written by [[recordMarks]] from the thread that
   * runs foreachBatch (a Py4J thread for Python), read when the next round is planned.
   */
  private val marksByRound = new java.util.concurrent.ConcurrentHashMap[Long, AcknowledgementMarks]()

  override def initialOffset(): Offset = KafkaShareSourceOffset.Initial

  override def deserializeOffset(json: String): Offset = KafkaShareSourceOffset.fromJson(json)

  override def latestOffset(): Offset =
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is used instead")

  /** Real-time mode: the accept point of its tasks, once Spark has prepared the stream for it. */
  @volatile private var realTime: Option[AcceptPoint] = None

  /**
   * Real-time mode: the backlog its progress reports show, looked up off the batches' turnover. Its
   * topics and backlog are its thread's own; no round tells that backlog of quiet partitions, so it
   * never reads a lock duration.
   */
  private lazy val realTimeBacklog = {
    val topics = new SubscribedTopics(admin, options.subscription)
    val ownBacklog = new Backlog(admin, ShareConsumerSettings.clientIdPrefix(options.groupId, runId), () => 0L)
    new BackgroundBacklog(options.groupId, () => { topics.refresh(); ownBacklog.refresh(topics.topics) })
  }

  override def latestOffset(start: Offset, limit: ReadLimit): Offset = {
    options.acknowledge.filter(_.realTime).foreach(p => throw KafkaShareErrors.realTimeOnly(p.name))
    val startRound = KafkaShareSourceOffset(start).round
    redeliveryWarnings.warnOf(counters.totals(QueryRunRegistry.countedOutsideTasks(runId)))
    policy.nextRound(startRound, lastPlanned) match {
      case Some(poll) =>
        offeredRounds(startRound + 1) = poll
        KafkaShareSourceOffset(startRound + 1)
      case None => start
    }
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
      outage.attempt("listing the subscribed topics")(subscribed.refresh())
      group.follow(backlog.partitionCount, outage.ongoing)
    }

    // A round lasts as long as its slowest task. While records flow, a slot that finds none has been
    // outpaced by the others (a fetch acquires whole record batches, and the group's lock limit per
    // partition is taken), so waiting rarely brings it records: it should not hold the round long.
    val pollTimeoutMs =
      if (policy.flowing) math.min(options.pollTimeoutMs, FlowingPollTimeoutMs) else options.pollTimeoutMs
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
      partition.currentLocation =
        () => slotLocations.homes.get(slot).filter(ExecutorLocality.sortedExecutors().contains)
      partition: InputPartition
    }.toArray
    // Only a round that waits the full poll timeout may show that a partition is empty. Real-time mode
    // never drains, and its turnovers wait on the planning: it reads no end offsets.
    val roundStart = if (poll && !policy.flowing && realTime.isEmpty) {
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
      if (checkpointAcceptPoint.reRunsAfterLog) log.sealBatch(round) else log.readBatch(round)
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

  override def createReaderFactory(): PartitionReaderFactory =
    KafkaSharePartitionReaderFactory(counters, slotLocations, recordsLog, afterLog.isDefined)

  /** Real-time mode: the accept point its tasks use, once Spark has prepared the stream for it. */
  private[planning] def realTimeAcceptPoint: Option[AcceptPoint] = realTime

  /** Real-time mode: checks the options against it, and chooses how the tasks acknowledge records. */
  private[planning] def prepareRealTime(): Unit = {
    val point = RealTimeMode.acceptPoint(options, query.toSeq.flatMap(_.sinkClassNames))
    logInfo(s"Real-time mode: each task ACCEPTs its records ${point.name}")
    realTime = Some(point)
  }

  /** Real-time mode: the round after `start`, one partition per slot. */
  private[planning] def planRealTime(start: Offset): Array[InputPartition] = {
    val committedThrough = KafkaShareSourceOffset(start).round
    val planned = planSlots(committedThrough, committedThrough + 1, poll = true)
    lastPlanned = Some(planned)
    planned.partitions
  }

  /** Real-time mode: the batch's end offset, the round its tasks ran (the one planned, if none reported). */
  private[planning] def mergeRealTimeOffsets(ends: Array[PartitionOffset]): Offset =
    KafkaShareSourceOffset(ends.collect { case KafkaShareRoundEnd(round) => round }.reduceOption[Long](math.max)
      .orElse(lastPlanned.map(_.round)).getOrElse(throw new IllegalStateException("no real-time round was planned")))

  override def commit(end: Offset): Unit = {
    committedRound = math.max(committedRound, KafkaShareSourceOffset(end).round)
    // Slots have settled older rounds, but for a round a slot last read (its records are still held).
    val heldRounds = slotLocations.value.values.map(_.round).toSet
    marksByRound.keySet().removeIf(r => r < committedRound && !heldRounds.contains(r))
    QueryRunRegistry.publish(runId, RunState(committedRound, slotLocations.homes))
    checkpointAcceptPoint.committed()
    pruneRecordsLog()
  }

  /**
   * Forgets logged records that lie below their share-partition's start offset, or whose topic is
   * gone (Kafka never delivers those again), at most every [[RecordsLogPruneNanos]]; keeps the remembered count.
   */
  private def pruneRecordsLog(): Unit = recordsLog.foreach { log =>
    if (dedupPruned.forall(System.nanoTime() - _ > RecordsLogPruneNanos)) {
      dedupPruned = Some(System.nanoTime())
      try {
        val startOffsets = admin.partitionStates().map { case (tp, s) => tp -> s.startOffset() }
        dedupState = Some(log.prune(committedRound, startOffsets, admin.topicsGone))
      } catch { case NonFatal(e) => logWarning(s"Could not prune the records log in ${log.dir}", e) }
    }
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
  private def marks(round: Long): AcknowledgementMarks = Option(marksByRound.get(round)).getOrElse {
    if (options.acknowledgmentMode == AcknowledgmentMode.Explicit && round >= 0) AcknowledgementMarks(round, Map.empty)
    else AcknowledgementMarks.None
  }

  override def prepareForTriggerAvailableNow(): Unit = policy.startAvailableNow()

  override def metrics(latestConsumedOffset: Optional[Offset]): java.util.Map[String, String] =
    (counters.report(
      if (realTime.isDefined) realTimeBacklog.reported() else policy.reportedBacklog(lastPlanned),
      dedupState,
      QueryRunRegistry.countedOutsideTasks(runId)
    ) +
      ("consumers" -> parallelism.toString) + ("adminMs" -> admin.waitedMs.toString)).asJava

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
      if (realTime.isDefined) realTimeBacklog.close()
      admin.close()
    }
  }
}

private[sparkkafkashare] object KafkaShareMicroBatchStream {

  /** The poll timeout of a round that follows a round that acquired records (see planSlots). */
  val FlowingPollTimeoutMs = 50L

  /**
   * How many records a slot's round takes under `after-log`, unless `maxRecordsPerTrigger` says: a
   * batch holds them in the executor's memory, and Spark's cost per batch is paid once for them.
   */
  val AfterLogRoundRecords = 50000L
  val RecordsLogPruneNanos: Long = TimeUnit.SECONDS.toNanos(10)

  /** The streams of the query runs in this driver, by run id: how explicit acknowledgements find theirs. */
  private val runs = new java.util.concurrent.ConcurrentHashMap[String, KafkaShareMicroBatchStream]()

  def running(runId: String): Option[KafkaShareMicroBatchStream] = Option(runs.get(runId))
}
