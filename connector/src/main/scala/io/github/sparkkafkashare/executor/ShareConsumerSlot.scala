package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.locks.ReentrantLock

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, RecordCoordinates}
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.executor.SlotState.{Refused, TurnedAway}
import org.apache.kafka.clients.consumer.{ConsumerConfig, ConsumerRecord}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.errors.{AuthorizationException, GroupAuthorizationException}
import org.apache.spark.internal.Logging

/**
 * One long-lived share consumer in explicit acknowledgement mode, used by one task at a time: its
 * state ([[SlotState]]) and the transitions that move it ([[SlotProtocol]]), run one at a time.
 *
 * Explicit mode is what lets the source wait for Spark's commit: a record is acknowledged only when
 * [[settle]] learns the fate of the batch that read it. Kafka requires every record of a poll to be
 * acknowledged before the next poll, so a slot polls once per round and settles first.
 *
 * While records wait for their batch to commit, the pool's lock renewer calls [[renewLocksIfDue]]
 * from its own thread, possibly while a task is still reading them: every transition holds
 * `consumerLock`, since a share consumer must not be used by two threads at once. A poll's records
 * are dated from the last poll that found the client's buffer empty ([[PollDating]]), renewed before
 * they are handed out once half their lock has gone, and while the slot's round is empty the renewer
 * takes in what the background fetch brings, to renew it until the next round hands it out. Whether
 * it renews, the lock duration it assumes, and how long its first poll waits follow the group's
 * configs: each task that borrows the slot brings the driver's latest ([[follow]]).
 *
 * @param limits    the group's configs as the driver read them. Its lock duration holds until the broker
 *                  tells the real one. Renewal is never tried when the group refuses it: a refused
 *                  renewal leaves the client returning the records again from later polls.
 * @param newClient the consumer, given its settings and the callback that counts what became of its acknowledgements
 */
private[sparkkafkashare] final class ShareConsumerSlot(
    val key: SlotKey,
    private[executor] val config: java.util.Map[String, Object],
    @volatile private var limits: GroupLimits,
    newClient: (java.util.Map[String, Object], AcknowledgementOutcomes) => ShareConsumerClient =
      ShareConsumerSlot.kafkaClient
) extends Logging {

  private val outcomes = new AcknowledgementOutcomes
  private val protocol = {
    val client =
      ExecutorKafkaClients.create(s"share consumer of slot ${key.slot}", groupId)(newClient(config, outcomes))
    new SlotProtocol(client, key.slot, outcomes, ShareConsumerSlot.fetchWait(config))
  }

  /** Held by the borrowing task for its whole run: one task per slot at a time. */
  private[executor] val lock = new SlotLock
  private val consumerLock = new ReentrantLock()
  @volatile private[executor] var lastUsedNanos: Long = System.nanoTime()
  @volatile private var state: SlotState = SlotState.initial(System.nanoTime())

  private def groupId = String.valueOf(config.get(ConsumerConfig.GROUP_ID_CONFIG))

  /**
   * Runs `step`, the transition `name`, from the slot's state, under the consumer lock, and moves the
   * slot to the state it returns: only along an edge [[SlotTransitions]] lists.
   */
  private def transition[T](name: String)(step: SlotState => (SlotState, T)): T = {
    consumerLock.lockInterruptibly()
    try {
      val from = state
      SlotTransitions.requireAccepted(name, from, key.slot)
      val (next, result) =
        try step(from)
        catch {
          case SlotTransitionFailed(next, cause) => moveTo(name, from, next); throw cause
        }
      moveTo(name, from, next)
      result
    } catch {
      // The group's ACLs refused this member: Kafka's client ends the membership and throws this once.
      case e: GroupAuthorizationException =>
        if (!state.ended) moveTo(SlotTransitions.Refusal, state, Refused(state.facts, e))
        throw notAuthorized(e)
      case e: AuthorizationException => throw notAuthorized(e)
    } finally consumerLock.unlock()
  }

  private def moveTo(transition: String, from: SlotState, next: SlotState): Unit = {
    state = next
    SlotTransitions.requireEdge(transition, from, next, key.slot)
  }

  private def notAuthorized(e: AuthorizationException) = KafkaShareErrors.notAuthorized(
    String.valueOf(config.get(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG)),
    s"slot ${key.slot} reading records of share group '$groupId'",
    e
  )

  /** Takes the group's configs as a task brought them from the driver. */
  def follow(latest: GroupLimits): Unit = limits = latest

  /** What happened to acknowledgements and locks since the last call. */
  def drainAcknowledgementEvents(): AcknowledgementEvents = outcomes.drain()

  /** The records this slot acquired for `round`, if it still holds them (the batch is being evaluated again). */
  def heldFor(round: Long): Option[java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]] =
    state.round.filter(_.round == round).map(_.visible)

  /** Whether this slot still holds what it acquired for `round`, without building the round's rows. */
  def holds(round: Long): Boolean = state.round.exists(_.round == round)

  /** How many records this slot holds the locks of for `round`. */
  def heldCount(round: Long): Int = state.round.filter(_.round == round).fold(0)(_.size)

  /** The ids of the topics whose records `round` acquired, as the broker delivered them. */
  def topicIds(round: Long): Map[TopicPartition, String] =
    state.round.filter(_.round == round).fold(Map.empty[TopicPartition, String])(_.topicIds)

  /** Whether this slot holds what it acquired for a round after `committedThrough`: a batch still running. */
  def holdsUncommitted(committedThrough: Long): Boolean = state.round.exists(_.round > committedThrough)

  /**
   * Whether what this slot holds is for its next task: a round after `committedThrough` (a batch
   * still running, which may read it again), records of any round (only the task knows the
   * acknowledgement marks of the batch that read them), or records taken in ahead of the next round.
   */
  def awaitsTask(committedThrough: Long): Boolean =
    state.round.exists(h => h.round > committedThrough || h.size > 0) || state.ahead.nonEmpty

  /** Whether the group was full when this consumer asked to join: it will never be a member. */
  def turnedAwayAsGroupFull: Boolean = state.isInstanceOf[TurnedAway]

  /** Whether polling `topics` next is this consumer's first poll, the one that joins the group. */
  def joinsWithNextPoll(topics: Set[String]): Boolean = !state.facts.joined && topics.nonEmpty

  /** [[SlotProtocol.settle]]; the acknowledgements ride on the next call that sends them, or [[flush]]. */
  def settle(committedThrough: Long, marks: AcknowledgementMarks, atHome: Boolean = true): Settlement =
    transition(SlotTransitions.Settle)(protocol.settle(_, committedThrough, marks, atHome))

  /** [[SlotProtocol.releaseLeftBehind]]. */
  def releaseLeftBehind(committedThrough: Long, timeout: Duration): Int =
    transition(SlotTransitions.ReleaseLeftBehind)(protocol.releaseLeftBehind(_, committedThrough, timeout))

  /** [[SlotProtocol.acceptDelivered]]. */
  def acceptDelivered(
      round: Long,
      delivered: Set[RecordCoordinates]
  ): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    transition(SlotTransitions.AcceptDelivered)(protocol.acceptDelivered(_, round, delivered))

  /** [[SlotProtocol.hide]]. */
  def hide(
      round: Long,
      loggedByOthers: Set[RecordCoordinates]
  ): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    transition(SlotTransitions.Hide)(protocol.hide(_, round, loggedByOthers))

  /**
   * [[SlotProtocol.releaseRound]]. A task that was interrupted (its query stopping, or its job
   * cancelled) cannot use the consumer, so its records stay held until the slot's next settlement or
   * its close, which settle them as any round's: RELEASEd, as their batch did not read them.
   */
  def releaseRound(round: Long, timeout: Duration): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    if (Thread.currentThread().isInterrupted) {
      logInfo(s"Slot ${key.slot}: the task of round $round was interrupted; its records are released when the " +
        "slot settles next or closes.")
      java.util.List.of()
    } else transition(SlotTransitions.ReleaseRound)(protocol.releaseRound(_, round, timeout))

  /** [[SlotProtocol.pollRound]], with the group's configs the last task brought. */
  def pollRound(
      round: Long,
      topics: Set[String],
      timeout: Duration,
      inParts: Boolean = false
  ): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    transition(SlotTransitions.PollRound)(protocol.pollRound(_, round, topics, timeout, limits, inParts))

  /** [[SlotProtocol.pollPart]], with the group's configs the last task brought. */
  def pollPart(round: Long, timeout: Duration): java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    transition(SlotTransitions.PollPart)(protocol.pollPart(_, round, timeout, limits))

  /** [[SlotProtocol.acceptProcessed]]. */
  def acceptProcessed(round: Long, processed: Int): Int =
    transition(SlotTransitions.AcceptProcessed)(protocol.acceptProcessed(_, round, processed))

  /** [[SlotProtocol.acceptLogged]]. */
  def acceptLogged(round: Long, timeout: Duration): Int =
    transition(SlotTransitions.AcceptLogged)(protocol.acceptLogged(_, round, timeout))

  /**
   * [[SlotProtocol.renewIfDue]], when the group allows renewal. Skipped while a task uses the
   * consumer; the renewer comes back shortly.
   */
  def renewLocksIfDue(): Unit = if (limits.renewAllowed && consumerLock.tryLock()) {
    try transition(SlotTransitions.RenewIfDue)(s => (protocol.renewIfDue(s, limits), ()))
    finally consumerLock.unlock()
  }

  /**
   * Sends pending acknowledgements now instead of with the next poll, and waits up to `timeout` for
   * the broker's answer: the partitions whose acknowledgements it did not apply (it delivers those
   * records again), or None when it did not answer in time. The acknowledgement callback counts both,
   * the latter when the answer comes.
   */
  def flush(timeout: Duration): Option[Set[TopicPartition]] =
    transition(SlotTransitions.Flush)(s => (s, protocol.commit(timeout)))

  /** [[SlotProtocol.stopFetching]]. */
  def stopFetching(): Duration = transition(SlotTransitions.StopFetching)(protocol.stopFetching)

  /** [[SlotProtocol.close]]. */
  def close(committedThrough: Long, marks: AcknowledgementMarks, timeout: Duration): Unit =
    transition(SlotTransitions.Close)(s => (protocol.close(s, committedThrough, marks, timeout), ()))
}

private[executor] object ShareConsumerSlot {

  /** Kafka's share consumer. */
  private def kafkaClient(
      config: java.util.Map[String, Object],
      outcomes: AcknowledgementOutcomes
  ): ShareConsumerClient =
    new KafkaShareConsumerClient(config, outcomes)

  /** For the broker's answer to a fetch that waited its full `fetch.max.wait.ms` to reach the client. */
  private val FetchResponseMargin = Duration.ofMillis(200)

  /** How long a fetch the client has sent may still acquire records once it stops fetching. */
  private def fetchWait(config: java.util.Map[String, Object]): Duration = {
    val fetchWaitMs =
      Option(config.get(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG)).map(_.toString.trim.toLong) // Kafka trims it too
        .getOrElse(ConsumerConfig.DEFAULT_FETCH_MAX_WAIT_MS.toLong)
    Duration.ofMillis(fetchWaitMs).plus(FetchResponseMargin)
  }
}
