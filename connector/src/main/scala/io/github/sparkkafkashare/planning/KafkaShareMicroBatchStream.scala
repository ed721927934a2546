package io.github.sparkkafkashare.planning

import java.util.{Optional, UUID}
import java.util.concurrent.TimeUnit

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.github.sparkkafkashare
  .acknowledgements.{CheckpointAcceptPoint, DeliveredRecordsIndex, RecordCoordinates, RoundRecordsLog}
import io.github.sparkkafkashare.executor.{KafkaSharePartitionReaderFactory, SlotLocations}
import io.github.sparkkafkashare.metrics.{KafkaShareSourceMetrics, RedeliveryWarnings}
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.offsets.{KafkaShareRoundEnd, KafkaShareSourceOffset}
import io.github.sparkkafkashare.options.{AcceptPoint, ConflictingSparkSetting, KafkaShareSourceOptions}
import io.github.sparkkafkashare.runs.RunState
import org.apache.hadoop.fs.Path
import org.apache.kafka.clients.consumer.AcknowledgeType
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
 * What a round is, and when one is offered, is [[RoundPlanner]]'s to say (and its [[RoundPolicy]]'s);
 * the group's limits and the consumers' settings are [[GroupFollower]]'s to follow. This class keeps
 * Spark's role: the session, the checkpoint and its records log, the registry of query runs,
 * progress reports, and settling and closing the consumers on stop.
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

  private val planner = new RoundPlanner(
    options,
    runId,
    parallelism,
    admin,
    group,
    counters,
    slotLocations,
    recordsLog,
    () => checkpointAcceptPoint.reRunsAfterLog,
    () => ExecutorLocality.sortedExecutors(),
    () => ExecutorLocality.sortedExecutors().toSet + ExecutorLocality.currentExecutor(),
    () => QueryRunRegistry.countedOutsideTasks(runId),
    triggersBackToBack = query.exists(_.runsBackToBack)
  )
  private val redeliveryWarnings = new RedeliveryWarnings(options.groupId, KafkaShareSourceOptions.LockTimeoutMs)

  /** The records log's last pruning: when, and how many records it still remembers (stream execution thread only). */
  private var pruned: Option[RecordsLogPruned] = None

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
    planner.offer(startRound).fold(start)(KafkaShareSourceOffset(_))
  }

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] =
    planner.plan(KafkaShareSourceOffset(start).round, KafkaShareSourceOffset(end).round, realTime.isEmpty)

  override def createReaderFactory(): PartitionReaderFactory =
    KafkaSharePartitionReaderFactory(counters, slotLocations, recordsLog, planner.inParts)

  /** Real-time mode: the accept point its tasks use, once Spark has prepared the stream for it. */
  private[planning] def realTimeAcceptPoint: Option[AcceptPoint] = realTime

  /** Real-time mode: checks the options against it, and chooses how the tasks acknowledge records. */
  private[planning] def prepareRealTime(): Unit = {
    val point = RealTimeMode.acceptPoint(options, query.toSeq.flatMap(_.sinkClassNames))
    logInfo(s"Real-time mode: each task ACCEPTs its records ${point.name}")
    realTime = Some(point)
  }

  /** Real-time mode: the round after `start`, one partition per slot. */
  private[planning] def planRealTime(start: Offset): Array[InputPartition] =
    planner.planRealTime(KafkaShareSourceOffset(start).round)

  /** Real-time mode: the batch's end offset, the round its tasks ran (the one planned, if none reported). */
  private[planning] def mergeRealTimeOffsets(ends: Array[PartitionOffset]): Offset =
    KafkaShareSourceOffset(ends.collect { case KafkaShareRoundEnd(round) => round }.reduceOption[Long](math.max)
      .orElse(planner.current.lastPlanned.map(_.round))
      .getOrElse(throw new IllegalStateException("no real-time round was planned")))

  override def commit(end: Offset): Unit = {
    val committedRound = planner.commit(KafkaShareSourceOffset(end).round)
    QueryRunRegistry.publish(runId, RunState(committedRound, slotLocations.homes))
    checkpointAcceptPoint.committed()
    pruneRecordsLog(committedRound)
  }

  /**
   * Forgets logged records that lie below their share-partition's start offset, or whose topic is
   * gone (Kafka never delivers those again), at most every [[RecordsLogPruneNanos]]; keeps the remembered count.
   */
  private def pruneRecordsLog(committedRound: Long): Unit = recordsLog.foreach { log =>
    if (pruned.forall(System.nanoTime() - _.at > RecordsLogPruneNanos)) {
      val at = System.nanoTime()
      val remembered =
        try {
          val startOffsets = admin.partitionStates().map { case (tp, s) => tp -> s.startOffset() }
          Some(log.prune(committedRound, startOffsets, admin.topicsGone))
        } catch {
          case NonFatal(e) =>
            logWarning(s"Could not prune the records log in ${log.dir}", e)
            pruned.flatMap(_.remembered)
        }
      pruned = Some(RecordsLogPruned(at, remembered))
    }
  }

  /** Explicit mode: user code's acknowledgements for records of `round` ([[RoundPlanner.recordMarks]]). */
  def recordMarks(round: Long, marks: Map[RecordCoordinates, AcknowledgeType]): Unit = planner.recordMarks(round, marks)

  override def prepareForTriggerAvailableNow(): Unit = planner.startAvailableNow()

  override def metrics(latestConsumedOffset: Optional[Offset]): java.util.Map[String, String] =
    (counters.report(
      if (realTime.isDefined) realTimeBacklog.reported() else planner.reportedBacklog(),
      pruned.flatMap(_.remembered),
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
    val (committedThrough, lastMarks) =
      planner.settledAtStop(query.flatMap(_.committedOffset(this)).map(KafkaShareSourceOffset(_).round))
    runs.remove(runId)
    DeliveredRecordsIndex.forget(runId)
    val homes = slotLocations.homes
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
  val RecordsLogPruneNanos: Long = TimeUnit.SECONDS.toNanos(10)

  /** The streams of the query runs in this driver, by run id: how explicit acknowledgements find theirs. */
  private val runs = new java.util.concurrent.ConcurrentHashMap[String, KafkaShareMicroBatchStream]()

  def running(runId: String): Option[KafkaShareMicroBatchStream] = Option(runs.get(runId))

  /** The records log's last pruning, begun `at`, and the records it remembered then (None until one ends). */
  private final case class RecordsLogPruned(at: Long, remembered: Option[Long])
}
