package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.TimeUnit
import java.util.concurrent.locks.ReentrantLock

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, HeldRecords, RecordCoordinates}
import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerConfig, ConsumerRecord}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.errors.{AuthorizationException, GroupAuthorizationException}
import org.apache.spark.internal.Logging

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
 * a poll's records were acquired when the poll returned: it dates them ([[DatedPolls]]) from the last poll that found
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

  private val outcomes = new AcknowledgementOutcomes
  private val consumer: ShareConsumerClient = ExecutorKafkaClients.create(
      s"share consumer of slot ${key.slot}", String.valueOf(config.get(ConsumerConfig.GROUP_ID_CONFIG))) {
    new KafkaShareConsumerClient(config, outcomes)
  }
  /** Held by the borrowing task for its whole run: one task per slot at a time. */
  private[executor] val lock = new SlotLock
  private val consumerLock = new ReentrantLock()
  @volatile private[executor] var lastUsedNanos: Long = System.nanoTime()

  private var subscribed: Set[String] = Set.empty
  /** Whether this consumer has polled: its first poll is when it joins the group. */
  private var polledOnce = false
  @volatile private var held: Option[HeldRecords] = None
  /** Records the background fetch brought in after an empty round: the next round hands them out. */
  @volatile private var acquiredAhead: Option[HeldRecords] = None
  /** When the renewer last took in what the background fetch brought, while the slot's round was empty. */
  private var takenInAtNanos: Long = System.nanoTime()
  /**
   * Set by [[stopFetching]] and [[close]]: the consumer polls no more, so the renewer leaves it alone
   * (it may still hold this slot from before the pool dropped it).
   */
  @volatile private var stoppedPolling = false
  /**
   * The group's ACLs refused this member. Kafka's client then ends the membership and throws the
   * refusal from one call only; its later polls return nothing, so a retried task would read nothing
   * and the query would run on, reading nothing. Every later round throws it again instead.
   */
  @volatile private var groupRefusal: Option[GroupAuthorizationException] = None
  /** The highest round this slot has been told is committed, and the marks of that round. */
  private var committedThrough: Long = -1L
  private var marks: AcknowledgementMarks = AcknowledgementMarks.None


  private val polls = new DatedPolls(consumer, key)

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
  def drainAcknowledgementEvents(): AcknowledgementEvents = outcomes.drain()

  /** The records this slot acquired for `round`, if it still holds them (the batch is being evaluated again). */
  def heldFor(round: Long): Option[java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]] =
    held.filter(_.round == round).map(_.visible)

  /** Whether this slot still holds what it acquired for `round`, without building the round's rows. */
  def holds(round: Long): Boolean = held.exists(_.round == round)

  /** How many records this slot holds the locks of for `round`. */
  def heldCount(round: Long): Int = held.filter(_.round == round).fold(0)(_.size)

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
        var accepted, released, rejected, notHeld = 0
        records.records.forEach { r =>
          val ackType = records.settlement(committed, this.marks, r)
          if (!consumer.acknowledge(r, ackType)) notHeld += 1
          else ackType match {
            case AcknowledgeType.ACCEPT => accepted += 1
            case AcknowledgeType.RELEASE => released += 1
            case _ => rejected += 1 // a settlement is ACCEPT, RELEASE or REJECT
          }
        }
        held = None
        if (notHeld > 0) warnNotHeld(records.round, notHeld, records.size)
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
   * Takes redeliveries of records an earlier round handed to Spark out of what `round` hands to Spark,
   * and ACCEPTs them at once (the `checkpoint-dedup` and `two-phase-commit` strategies drop them).
   * Returns the rest.
   */
  def acceptDelivered(round: Long, delivered: Set[RecordCoordinates])
      : java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = withConsumer {
    val records = heldRound(round)
    val (accepted, kept) = records.records.asScala.partition(r => delivered.contains(RecordCoordinates.of(r)))
    acknowledgeAll(records.round, accepted.asJava, AcknowledgeType.ACCEPT)
    val remaining = records.copy(records = new java.util.ArrayList(kept.asJava))
    held = Some(remaining) // before the flush: if it fails, the accepted ones are no longer this round's to settle
    // Sent now: they wait for no batch, and their locks would run on while this round's batch runs.
    if (accepted.nonEmpty) flush(ShareConsumerPool.CloseTimeout)
    remaining.visible
  }

  /**
   * Keeps `loggedByOthers` held but out of what `round` hands to Spark: another slot logged them for
   * this same round first, and its batch holds them. They are settled with the round. Returns the rest.
   */
  def hide(round: Long, loggedByOthers: Set[RecordCoordinates]): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    withConsumer {
      val records = heldRound(round)
      held = Some(records.copy(hidden = records.hidden ++ loggedByOthers))
      held.get.visible
    }

  /** The ids of the topics whose records `round` acquired, as the broker delivered them. */
  def topicIds(round: Long): Map[TopicPartition, String] = held.filter(_.round == round).fold(Map.empty[TopicPartition, String])(_.topicIds)

  private def heldRound(round: Long): HeldRecords =
    held.filter(_.round == round).getOrElse(throw new IllegalStateException(s"round $round is not held"))

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
        acknowledgeAll(round, records.records, AcknowledgeType.RELEASE)
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
      if (topics.isEmpty) consumer.unsubscribe() else consumer.subscribe(topics)
      subscribed = topics
    }
    val polled =
      if (subscribed.isEmpty) HeldRecords(round, new java.util.ArrayList(), System.nanoTime())
      else acquiredAhead.getOrElse {
        val wait = if (polledOnce) timeout else firstPollTimeout(timeout)
        polledOnce = true
        polls.untilRecords(wait)
      }
    acquiredAhead = None
    val locked = if (renewDue(polled)) RecordLockRenewal.renew(consumer, key.slot, polled, outcomes) else polled
    // Not handed to Spark yet, so records whose renewal was refused are simply left out.
    held = Some(locked.copy(round = round, hidden = Set.empty, unlocked = Nil))
    // Against the poll size the driver logs, this shows polls that came back short (docs/benchmarks.md, d).
    logDebug(s"Slot ${key.slot}, round $round: acquired ${locked.size} records")
    locked.records
  }

  /** Whether the group was full when this consumer asked to join: it will never be a member ([[DatedPolls.turnedAway]]). */
  def turnedAwayAsGroupFull: Boolean = polls.turnedAway

  /** The consumer polls no more: it was stopped, or the full group turned it away. */
  private def stopped: Boolean = stoppedPolling || polls.turnedAway

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

  private def releaseAcquiredAhead(): Unit = {
    acquiredAhead.foreach(ahead => acknowledgeAll(ahead.round, ahead.records, AcknowledgeType.RELEASE))
    acquiredAhead = None
  }

  /** Acknowledges each of `records` that the client still holds; warns once if it holds some no more. */
  private def acknowledgeAll(round: Long, records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]],
      ackType: AcknowledgeType): Unit = {
    val notHeld = records.asScala.count(r => !consumer.acknowledge(r, ackType))
    if (notHeld > 0) warnNotHeld(round, notHeld, records.size)
  }

  /**
   * Once per call that meets them: records the client no longer holds lost their locks as a renewal
   * failed or got no answer in time (a broker that stopped answering past their lock); the
   * acknowledgement callback counts them as such when the renewal's outcome arrives, and the group
   * delivers them again.
   */
  private def warnNotHeld(round: Long, notHeld: Int, of: Int): Unit = {
    val which = if (round == HeldRecords.NoRound) "taken in ahead of a round" else s"of round $round"
    logWarning(s"Slot ${key.slot}: the consumer no longer holds $notHeld of the $of records $which: their lock " +
      "renewal failed, or its broker did not answer it in time. The group delivers them again.")
  }

  private def renewDue(records: HeldRecords): Boolean = limits.renewAllowed && records.size > 0 &&
    System.nanoTime() - records.lockedSinceNanos > lockNanos / 2

  private def lockNanos: Long = TimeUnit.MILLISECONDS.toNanos(consumer.acquisitionLockTimeoutMs.getOrElse(limits.lockDurationMs))

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
      if (held.forall(_.size == 0) && acquiredAhead.isEmpty && polls.fetchingInBackground && subscribed.nonEmpty &&
          System.nanoTime() - takenInAtNanos > lockNanos / 4) {
        takenInAtNanos = System.nanoTime()
        acquiredAhead = Some(polls.once(Duration.ZERO)).filter(_.size > 0)
      }
      held.filter(renewDue).foreach(records => held = Some(RecordLockRenewal.renew(consumer, key.slot, records, outcomes)))
      acquiredAhead.filter(renewDue).foreach { records =>
        acquiredAhead = Some(RecordLockRenewal.renew(consumer, key.slot, records, outcomes))
      }
    } finally consumerLock.unlock()
  }

  /**
   * Sends pending acknowledgements now instead of with the next poll, and waits up to `timeout` for
   * the broker's answer: the partitions whose acknowledgements it did not apply (it delivers those
   * records again), or None when it did not answer in time. The acknowledgement callback counts both,
   * the latter when the answer comes.
   */
  def flush(timeout: Duration): Option[Set[TopicPartition]] = withConsumer(RecordLockRenewal.commit(consumer, key.slot, timeout))

  /**
   * Leaves the group, so that the client sends no more fetches, and keeps what the slot holds for
   * [[close]] to settle. Returns how long a fetch the client had already sent may still acquire
   * records: the broker answers it within its `fetch.max.wait.ms`. Leaving waits for the group
   * coordinator, up to the consumer's `default.api.timeout.ms` if it cannot be reached.
   */
  def stopFetching(): Duration = withConsumer {
    val closedOrStopped = stopped
    stoppedPolling = true
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
      stoppedPolling = true
      consumer.close(timeout)
    }
  }

  /** For the broker's answer to a fetch that waited its full `fetch.max.wait.ms` to reach the client. */
  private val FetchResponseMargin = Duration.ofMillis(200)
  /** For the group's next assignment, due at most an assignment interval after this consumer joined, to be made. */
  private val AssignmentMargin = Duration.ofMillis(200)
  /** A new group's first consumer has records about 0.5 s after it joined (docs/benchmarks.md, "Joining the group"). */
  private val JoinAndFetch = Duration.ofSeconds(1)
}
