package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.locks.ReentrantLock

import scala.jdk.CollectionConverters._
import scala.jdk.OptionConverters._

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, HeldRecords, RecordCoordinates}
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.metrics.KafkaShareCountMetric
import org.apache.kafka.clients.consumer.{AcknowledgeType, AcknowledgementCommitCallback, ConsumerConfig, ConsumerRecord, KafkaShareConsumer}
import org.apache.kafka.common.TopicIdPartition
import org.apache.kafka.common.errors.{AuthorizationException, GroupAuthorizationException, GroupMaxSizeReachedException,
  InvalidRecordStateException}
import org.apache.kafka.common.serialization.ByteArrayDeserializer
import org.apache.spark.internal.Logging

/** Identifies the share consumer of one slot of one query run. */
private[sparkkafkashare] final case class SlotKey(runId: String, slot: Int)

/** How a settlement acknowledged the records it found held. */
private[sparkkafkashare] final case class Settlement(accepted: Int, released: Int, rejected: Int)

/**
 * What happened to a slot's acknowledgements and locks since a task last asked, for it to report as
 * metrics: records whose lock was renewed; records whose acknowledgement the broker refused because
 * the lock had expired; records whose acknowledgement was not applied for another reason.
 */
private[sparkkafkashare] final case class AcknowledgementEvents(renewed: Long, expired: Long, failed: Long) {
  def byMetric: Map[KafkaShareCountMetric, Long] = Map(KafkaShareCountMetric.LockRenewals -> renewed,
    KafkaShareCountMetric.LocksExpired -> expired, KafkaShareCountMetric.AcknowledgementsFailed -> failed)
}

/**
 * One long-lived share consumer in explicit acknowledgement mode, used by one task at a time.
 *
 * Explicit mode is what lets the source wait for Spark's commit: a record is acknowledged only when
 * [[settle]] learns the fate of the batch that read it. Kafka requires every record of a poll to be
 * acknowledged before the next poll, so a slot polls once per round and settles first.
 *
 * While records wait for their batch to commit, the pool's lock renewer calls [[renewLocksIfDue]]
 * from its own thread, possibly while a task is still reading them: every use of the consumer
 * holds [[consumerLock]], since a share consumer must not be used by two threads at once.
 *
 * A poll that returns nothing leaves the client fetching in the background until records arrive,
 * and those records are acquired, their locks running, while they wait in the client for the next
 * poll; a poll may also leave part of what it fetched in the client. So the slot never assumes that
 * a poll's records were acquired when the poll returned: it dates them from the last poll that found
 * the client's buffer empty, renews them before handing them out when half their lock has gone, and
 * while its round is empty, takes what the background fetch brings in ([[acquiredAhead]]) to renew
 * it until the next round hands it out. Whether it renews, the lock duration it assumes, and how long
 * its first poll waits follow the group's configs: each task that borrows the slot brings the
 * driver's latest ([[follow]]).
 *
 * @param limits the group's configs as the driver read them. Its lock duration holds until the broker
 *               tells the real one. Renewal is never tried when the group refuses it: a refused
 *               renewal leaves the client returning the records again from later polls.
 */
private[sparkkafkashare] final class ShareConsumerSlot(
    val key: SlotKey,
    private[executor] val config: java.util.Map[String, Object],
    @volatile private var limits: GroupLimits)
  extends Logging {

  private val consumer = ExecutorKafkaClients.create(
      s"share consumer of slot ${key.slot}", String.valueOf(config.get(ConsumerConfig.GROUP_ID_CONFIG))) {
    new KafkaShareConsumer[Array[Byte], Array[Byte]](config, new ByteArrayDeserializer, new ByteArrayDeserializer)
  }
  /** Held by the borrowing task for its whole run: one task per slot at a time. */
  private[executor] val lock = new ReentrantLock()
  private val consumerLock = new ReentrantLock()
  @volatile private[executor] var lastUsedNanos: Long = System.nanoTime()

  private var subscribed: Set[String] = Set.empty
  /** Whether this consumer has polled: its first poll is when it joins the group. */
  private var polledOnce = false
  @volatile private var held: Option[HeldRecords] = None
  /** Records the background fetch brought in after an empty round: the next round hands them out. */
  @volatile private var acquiredAhead: Option[HeldRecords] = None
  /** Start of the last poll that returned nothing: whatever the client returns later was acquired after it. */
  private var bufferEmptySinceNanos: Long = System.nanoTime()
  /** The last poll returned nothing, so the client fetches in the background until records arrive. */
  private var fetchingInBackground = false
  /** When the renewer last took in what the background fetch brought, while the slot's round was empty. */
  private var takenInAtNanos: Long = System.nanoTime()
  /**
   * Set by [[stopFetching]] and [[close]]: the consumer polls no more, so the renewer leaves it alone
   * (it may still hold this slot from before the pool dropped it).
   */
  @volatile private var stopped = false
  /**
   * The group's ACLs refused this member. Kafka's client then ends the membership and throws the
   * refusal from one call only; its later polls return nothing, so a retried task would read nothing
   * and the query would run on, reading nothing. Every later round throws it again instead.
   */
  @volatile private var groupRefusal: Option[GroupAuthorizationException] = None
  /**
   * The group had as many members as the broker allows (`group.share.max.size`) when this consumer
   * asked to join. Kafka's client then gives up on the group for good, so the slot's next task
   * replaces the consumer with one that asks again: the query takes the place once another member
   * leaves (say, one of its own previous run's, whose session outlives a crash).
   */
  @volatile private var turnedAway = false
  /** The highest round this slot has been told is committed, and the marks of that round. */
  private var committedThrough: Long = -1L
  private var marks: AcknowledgementMarks = AcknowledgementMarks.None

  private val renewed = new AtomicLong()
  private val expired = new AtomicLong()
  private val failed = new AtomicLong()
  // Called from this slot's own consumer calls (poll, commitSync, close), with their results.
  consumer.setAcknowledgementCommitCallback(new AcknowledgementCommitCallback {
    override def onComplete(offsets: java.util.Map[TopicIdPartition, java.util.Set[java.lang.Long]], e: Exception): Unit = {
      lazy val records = offsets.values().asScala.map(_.size.toLong).sum
      e match {
        case null =>
        // The broker refuses an acknowledgement with INVALID_RECORD_STATE when this member no longer
        // holds the record: its lock expired and the group may already have delivered it elsewhere.
        case _: InvalidRecordStateException => expired.addAndGet(records)
        // Any other failure leaves the records acquired until their lock expires; then they come back.
        // Kafka's client fails, with NOT_LEADER_OR_FOLLOWER and without sending them, the
        // acknowledgements of a partition no longer in its share session (lost in a rebalance).
        case _ => failed.addAndGet(records)
      }
    }
  })

  private def withConsumer[T](body: => T): T = {
    consumerLock.lockInterruptibly()
    try body catch {
      case e: GroupAuthorizationException => groupRefusal = Some(e); throw notAuthorized(e)
      case e: AuthorizationException => throw notAuthorized(e)
    } finally consumerLock.unlock()
  }

  private def notAuthorized(e: AuthorizationException) = KafkaShareErrors.notAuthorized(
    String.valueOf(config.get(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG)),
    s"slot ${key.slot} reading records of share group '${config.get(ConsumerConfig.GROUP_ID_CONFIG)}'", e)

  /** Takes the group's configs as a task brought them from the driver. */
  def follow(latest: GroupLimits): Unit = limits = latest

  /** What happened to acknowledgements and locks since the last call. */
  def drainAcknowledgementEvents(): AcknowledgementEvents =
    AcknowledgementEvents(renewed.getAndSet(0), expired.getAndSet(0), failed.getAndSet(0))

  /** The records this slot acquired for `round`, if it still holds them (the batch is being evaluated again). */
  def heldFor(round: Long): Option[java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]] =
    held.filter(_.round == round).map(_.visible)

  /** Whether this slot still holds what it acquired for `round`, without building the round's rows. */
  def holds(round: Long): Boolean = held.exists(_.round == round)

  /** Whether this slot holds what it acquired for a round after `committedThrough`: a batch still running. */
  def holdsUncommitted(committedThrough: Long): Boolean = held.exists(_.round > committedThrough)

  /**
   * Whether what this slot holds is for its next task: a round after `committedThrough` (a batch
   * still running, which may read it again), records of any round (only the task knows the
   * acknowledgement marks of the batch that read them), or records taken in ahead of the next round.
   */
  def awaitsTask(committedThrough: Long): Boolean =
    held.exists(h => h.round > committedThrough || h.size > 0) || acquiredAhead.nonEmpty

  /**
   * ACCEPTs (or, for marked records, RELEASEs or REJECTs) what the slot holds from a committed
   * round, and RELEASEs what it holds from any other. Acknowledgements ride on the next poll;
   * [[flush]] sends them at once.
   *
   * @param atHome false when the slot's last task ran on another executor: this consumer was left
   *               behind, and what it holds may not be what the committed batch read, so it is
   *               all RELEASEd (a redelivery at worst, never a loss)
   */
  def settle(committedThrough: Long, marks: AcknowledgementMarks, atHome: Boolean = true): Settlement = withConsumer {
    if (committedThrough >= this.committedThrough) {
      this.committedThrough = committedThrough
      if (marks.round >= this.marks.round) this.marks = marks
    }
    held match {
      case None => Settlement(0, 0, 0)
      case Some(records) => // possibly empty
        val committed = if (atHome) this.committedThrough else -1L
        var accepted, released, rejected = 0
        records.records.forEach { r =>
          val ackType = records.settlement(committed, this.marks, r)
          consumer.acknowledge(r, ackType)
          ackType match {
            case AcknowledgeType.ACCEPT => accepted += 1
            case AcknowledgeType.RELEASE => released += 1
            case _ => rejected += 1 // a settlement is ACCEPT, RELEASE or REJECT
          }
        }
        held = None
        Settlement(accepted, released, rejected)
    }
  }

  /**
   * For a consumer left behind (its slot's tasks now run on another executor, so no task of its
   * own settles it): RELEASEs what it holds from committed rounds, and what it took in ahead, at
   * once, instead of renewing their locks until the pool closes it. Records of a later round belong
   * to a batch still running, and stay. The consumer stays open in case its slot comes back.
   * Returns how many records of a round it released.
   */
  def releaseLeftBehind(committedThrough: Long, timeout: Duration): Int = withConsumer {
    if (stopped || holdsUncommitted(committedThrough) || (held.isEmpty && acquiredAhead.isEmpty)) 0
    else {
      val released = settle(committedThrough, AcknowledgementMarks.None, atHome = false).released
      releaseAcquiredAhead()
      flush(timeout)
      released
    }
  }

  /**
   * Takes out of what the round hands to Spark the records Spark already has: redeliveries of
   * records an earlier round handed to Spark are ACCEPTed at once (the `checkpoint-dedup` and
   * `two-phase-commit` strategies drop them); records another slot logged for this same round (its
   * consumer lost them with its executor, and its retry reads them back from the log) stay held,
   * hidden, and are settled with the round. Returns the rest.
   */
  def dropDuplicates(round: Long, deliveredEarlier: Set[RecordCoordinates], loggedThisRound: Set[RecordCoordinates])
      : java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = withConsumer {
    val records = held.filter(_.round == round).getOrElse(throw new IllegalStateException(s"round $round is not held"))
    val (accepted, kept) = records.records.asScala.partition(r => deliveredEarlier.contains(RecordCoordinates.of(r)))
    accepted.foreach(r => consumer.acknowledge(r, AcknowledgeType.ACCEPT))
    val remaining = new HeldRecords(round, new java.util.ArrayList(kept.asJava), records.lockedSinceNanos,
      records.hidden ++ loggedThisRound, records.unlocked)
    held = Some(remaining) // before the flush: if it fails, the accepted ones are no longer this round's to settle
    // Sent now: they wait for no batch, and their locks would run on while this round's batch runs.
    if (accepted.nonEmpty) flush(ShareConsumerPool.CloseTimeout)
    remaining.visible
  }

  /**
   * Releases what the given round acquired, and returns it: no batch reads those records (another
   * evaluation of the round logged others). A task that was interrupted (its query stopping, or its
   * job cancelled) cannot use the consumer, so its records stay held until the slot's next settlement
   * or its close, which settle them as any round's: RELEASEd, as their batch did not read them.
   */
  def releaseRound(round: Long, timeout: Duration): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    if (Thread.currentThread().isInterrupted) {
      logInfo(s"Slot ${key.slot}: the task of round $round was interrupted; its records are released when the " +
        "slot settles next or closes.")
      java.util.List.of()
    } else withConsumer {
      held.filter(_.round == round).fold(java.util.List.of[ConsumerRecord[Array[Byte], Array[Byte]]]()) { records =>
        records.records.forEach(r => consumer.acknowledge(r, AcknowledgeType.RELEASE))
        held = None
        flush(timeout)
        records.records
      }
    }

  /**
   * Polls until records arrive or the timeout passes, and holds what arrived for `round` (an empty
   * holding too: an evaluation of the same batch again must find nothing again, not poll anew).
   * Empty polls acquire nothing, so they may repeat; a non-empty one ends the round's polling.
   * Records the slot took in ahead of the round are the round's records, without a poll. Records
   * that may have waited in the client for half their lock are renewed before they are returned;
   * those whose lock the broker no longer holds are not returned (the group delivers them again).
   * The consumer's first poll waits at most just past the group's assignment interval, 1 s at least,
   * and never longer than `timeout` ([[firstPollTimeout]]).
   */
  def pollRound(round: Long, topics: Set[String], timeout: Duration)
      : java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = withConsumer {
    groupRefusal.foreach(e => throw e) // withConsumer reports it, as it did the first time
    require(held.isEmpty, s"slot ${key.slot} polled while records of round ${held.get.round} are unsettled")
    if (topics != subscribed) {
      releaseAcquiredAhead()
      if (topics.isEmpty) consumer.unsubscribe() else consumer.subscribe(topics.asJava)
      subscribed = topics
    }
    val polled =
      if (subscribed.isEmpty) new HeldRecords(round, new java.util.ArrayList(), System.nanoTime())
      else acquiredAhead.getOrElse {
        val wait = if (polledOnce) timeout else firstPollTimeout(timeout)
        polledOnce = true
        pollUntilRecords(wait)
      }
    acquiredAhead = None
    val locked = if (renewDue(polled)) renew(polled) else polled
    // Not handed to Spark yet, so records whose renewal was refused are simply left out.
    held = Some(new HeldRecords(round, locked.records, locked.lockedSinceNanos))
    // Against the poll size the driver logs, this shows polls that came back short (docs/benchmarks.md, d).
    logDebug(s"Slot ${key.slot}, round $round: acquired ${locked.size} records")
    locked.records
  }

  /** Whether the group was full when this consumer asked to join: it will never be a member ([[turnedAway]]). */
  def turnedAwayAsGroupFull: Boolean = turnedAway

  /** Whether polling `topics` next is this consumer's first poll, the one that joins the group ([[firstPollTimeout]]). */
  def joinsWithNextPoll(topics: Set[String]): Boolean = !polledOnce && topics.nonEmpty

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
  private def firstPollTimeout(timeout: Duration): Duration = {
    val justAfter = Seq(Duration.ofMillis(limits.assignmentIntervalMs).plus(AssignmentMargin), JoinAndFetch).max
    Seq(justAfter, timeout).min
  }

  private def pollUntilRecords(timeout: Duration): HeldRecords = {
    val deadline = System.nanoTime() + timeout.toNanos
    // A zero-timeout poll first: records already in the client come back from it, and if none are,
    // what the longer polls bring was fetched after it started.
    var polled = pollDated(Duration.ZERO)
    var remaining = deadline - System.nanoTime() // read once per turn: a later read could be negative
    while (polled.size == 0 && remaining > 0 && !turnedAway) {
      polled = pollDated(Duration.ofNanos(remaining))
      remaining = deadline - System.nanoTime()
    }
    polled
  }

  /** One poll; its records are dated from the last poll that returned nothing, and belong to no round yet. */
  private def pollDated(timeout: Duration): HeldRecords = {
    val startedAt = System.nanoTime()
    val list = new java.util.ArrayList[ConsumerRecord[Array[Byte], Array[Byte]]]()
    // From a task's poll or the renewer's, whichever first meets it ([[turnedAway]]): the slot's next task replaces it.
    try consumer.poll(timeout).forEach(r => list.add(r)) catch {
      case e: GroupMaxSizeReachedException =>
        turnedAway = true
        stopped = true // polls no more: the renewer leaves it alone
        ShareConsumerSlot.warnTurnedAway(key, e)
    }
    val dated = new HeldRecords(HeldRecords.NoRound, list, bufferEmptySinceNanos)
    fetchingInBackground = list.isEmpty
    if (list.isEmpty) bufferEmptySinceNanos = startedAt
    dated
  }

  private def releaseAcquiredAhead(): Unit = {
    acquiredAhead.foreach(_.records.forEach(r => consumer.acknowledge(r, AcknowledgeType.RELEASE)))
    acquiredAhead = None
  }

  private def renewDue(records: HeldRecords): Boolean = limits.renewAllowed && records.size > 0 &&
    System.nanoTime() - records.lockedSinceNanos > lockNanos / 2

  private def lockNanos: Long =
    TimeUnit.MILLISECONDS.toNanos(consumer.acquisitionLockTimeoutMs().toScala.map(_.toLong).getOrElse(limits.lockDurationMs))

  /**
   * Renews the locks of held records once half their duration has passed, so a batch may take
   * longer than the lock. While the slot's round is empty, first takes in what the client fetched in
   * the background since, so that those records keep their locks too until the next round; every
   * quarter of a lock is enough, since they are dated from the last empty poll and renewed at half
   * (a poll each time the renewer comes round cost an idle stream CPU for nothing).
   * Skipped while a task uses the consumer; the renewer comes back shortly.
   */
  def renewLocksIfDue(): Unit = if (limits.renewAllowed && consumerLock.tryLock()) {
    try if (!stopped) {
      if (held.forall(_.size == 0) && acquiredAhead.isEmpty && fetchingInBackground && subscribed.nonEmpty &&
          System.nanoTime() - takenInAtNanos > lockNanos / 4) {
        takenInAtNanos = System.nanoTime()
        acquiredAhead = Some(pollDated(Duration.ZERO)).filter(_.size > 0)
      }
      held.filter(renewDue).foreach(records => held = Some(renew(records)))
      acquiredAhead.filter(renewDue).foreach(records => acquiredAhead = Some(renew(records)))
    } finally consumerLock.unlock()
  }

  /**
   * Kafka returns renewed records from the next poll and accepts acknowledgements only for records
   * of the latest poll, so a renewal is RENEW, send, poll; the records that come back replace the
   * held ones (a running batch already has their rows). Those that do not come back are kept as
   * [[HeldRecords.unlocked]]: a batch evaluated again must still read them.
   */
  private def renew(records: HeldRecords): HeldRecords = {
    val renewedAt = System.nanoTime()
    records.records.forEach(r => consumer.acknowledge(r, AcknowledgeType.RENEW))
    val refused = flush(RenewTimeout) // counted by the acknowledgement callback
    val expected = records.records.asScala.filterNot(r => refused.contains(r.topic() -> r.partition()))
      .map(RecordCoordinates.of).toSet
    val back = new java.util.ArrayList[ConsumerRecord[Array[Byte], Array[Byte]]](expected.size)
    val deadline = System.nanoTime() + RenewTimeout.toNanos
    // The client hands renewed records back from its own buffer, normally to the first poll. Only
    // one poll may return records: in explicit mode the next would fail until they are acknowledged,
    // which waits for their batch. Any not back by then count as not renewed.
    var wait = Duration.ZERO
    var returned = expected.isEmpty
    while (!returned && System.nanoTime() < deadline) {
      consumer.poll(wait).forEach { r =>
        returned = true
        if (expected.contains(RecordCoordinates.of(r))) back.add(r)
        // Fetched, not renewed: nothing can take it now, and the next poll needs it acknowledged.
        else consumer.acknowledge(r, AcknowledgeType.RELEASE)
      }
      wait = RenewPollInterval
    }
    renewed.addAndGet(back.size)
    if (back.size < records.size) {
      logWarning(s"Slot ${key.slot}: the locks of ${records.size - back.size} of ${records.size} records " +
        s"could not be renewed; the group will deliver those records again.")
    }
    val stillLocked = back.asScala.map(RecordCoordinates.of).toSet
    val notRenewed = records.records.asScala.filterNot(r => stillLocked.contains(RecordCoordinates.of(r)))
    new HeldRecords(records.round, back, renewedAt, records.hidden, records.unlocked ++ notRenewed)
  }

  /**
   * Sends pending acknowledgements now instead of with the next poll; returns the partitions whose
   * acknowledgements the broker did not apply (it will redeliver those records).
   */
  def flush(timeout: Duration): Set[(String, Int)] = withConsumer {
    val failures = consumer.commitSync(timeout).asScala.collect { case (tp, e) if e.isPresent => tp -> e.get }
    failures.foreach { case (tp, e) =>
      logWarning(s"Acknowledgements for $tp were not applied (${e.getMessage}); the broker will redeliver those records.")
    }
    failures.keySet.map(tp => tp.topic() -> tp.partition()).toSet
  }

  /**
   * Leaves the group, so that the client sends no more fetches, and keeps what the slot holds for
   * [[close]] to settle. Returns how long a fetch the client had already sent may still acquire
   * records: the broker answers it within its `fetch.max.wait.ms`. Leaving waits for the group
   * coordinator, up to the consumer's `default.api.timeout.ms` if it cannot be reached.
   */
  def stopFetching(): Duration = withConsumer {
    val closedOrStopped = stopped
    stopped = true
    if (closedOrStopped || subscribed.isEmpty) Duration.ZERO
    else {
      consumer.unsubscribe()
      subscribed = Set.empty
      val fetchWaitMs = Option(config.get(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG)).map(_.toString.trim.toLong) // Kafka trims it too
        .getOrElse(ConsumerConfig.DEFAULT_FETCH_MAX_WAIT_MS.toLong)
      Duration.ofMillis(fetchWaitMs).plus(FetchResponseMargin)
    }
  }

  /** Settles what is held by what the slot knows is committed, releases what it took in ahead, and leaves the group. */
  def close(committedThrough: Long, marks: AcknowledgementMarks, timeout: Duration): Unit = withConsumer {
    try {
      settle(committedThrough, marks)
      releaseAcquiredAhead()
    } finally {
      stopped = true
      consumer.close(timeout)
    }
  }

  private val RenewTimeout = Duration.ofSeconds(10)
  private val RenewPollInterval = Duration.ofMillis(20)
  /** For the broker's answer to a fetch that waited its full `fetch.max.wait.ms` to reach the client. */
  private val FetchResponseMargin = Duration.ofMillis(200)
  /** For the group's next assignment, due at most an assignment interval after this consumer joined, to be made. */
  private val AssignmentMargin = Duration.ofMillis(200)
  /** A new group's first consumer has records about 0.5 s after it joined (docs/benchmarks.md, "Joining the group"). */
  private val JoinAndFetch = Duration.ofSeconds(1)
}

private object ShareConsumerSlot extends Logging {
  private val WarnInterval = Duration.ofMinutes(1)
  private val lastWarnedNanos = new AtomicLong(System.nanoTime() - WarnInterval.toNanos)

  /** At most once a minute per JVM: while the group stays full, every round of the slot is turned away. */
  def warnTurnedAway(key: SlotKey, e: GroupMaxSizeReachedException): Unit = {
    val last = lastWarnedNanos.get()
    if (System.nanoTime() - last >= WarnInterval.toNanos && lastWarnedNanos.compareAndSet(last, System.nanoTime())) {
      logWarning(s"Slot ${key.slot}: the share group turned its consumer away (${e.getMessage}). The slot reads " +
        "nothing and asks again each round; the query's other consumers read on. Lower 'kafka.share.parallelism', " +
        "stop other members of the group, or raise the broker's group.share.max.size.")
    }
  }
}
