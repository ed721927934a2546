package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.{CountDownLatch, TimeUnit}

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, RecordCoordinates}
import io.github.sparkkafkashare.errors.KafkaShareRuntimeException
import io.github.sparkkafkashare.executor.ScriptedShareConsumer._
import io.github.sparkkafkashare.runs.{RunLookUp, RunState}
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord}
import org.apache.kafka.common.{KafkaException, TopicPartition}
import org.apache.kafka.common.errors.{GroupAuthorizationException, GroupMaxSizeReachedException, InvalidRecordStateException}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Every transition of a slot's protocol (docs/architecture.md draws them), with a scripted share
 * consumer in place of Kafka's: no broker. What Kafka's client and broker decide is tested against the
 * real broker elsewhere (ShareConsumerPoolSuite, BrokerPauseSuite, ShareConsumerClientSuite); here,
 * which calls the slot makes in each state and which state it moves to.
 */
class SlotProtocolSuite extends AnyFunSuite {

  private val groupConfig = Map[String, Object]("group.id" -> "g", "bootstrap.servers" -> "b:9092").asJava

  private def limits(lockMs: Long = 30000L, renew: Boolean = true, assignmentIntervalMs: Long = 1000L) =
    GroupLimits(renewAllowed = renew, recordLocksPerPartition = 2000, lockDurationMs = lockMs, assignmentIntervalMs)

  /** A slot over a scripted consumer; `script` sets it up before the slot's first call. */
  private def slot(groupLimits: GroupLimits = limits())(script: ScriptedShareConsumer => Unit)
      : (ShareConsumerSlot, ScriptedShareConsumer) = {
    var consumer: ScriptedShareConsumer = null
    val s = new ShareConsumerSlot(
      SlotKey("run", 3),
      groupConfig,
      groupLimits,
      (_, outcomes) => {
        consumer = new ScriptedShareConsumer(outcomes)
        script(consumer)
        consumer
      }
    )
    (s, consumer)
  }

  private def offsets(records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]): Seq[Long] =
    records.asScala.map(_.offset()).toSeq

  private def appliedOf(c: ScriptedShareConsumer, ackType: AcknowledgeType): Seq[Long] =
    c.applied.collect { case ((_, _, o), t) if t == ackType => o }.toSeq

  private val second = Duration.ofSeconds(1)

  test(
    "Idle to Holding: a round's poll returns what arrives, the first poll waiting just past the assignment interval"
  ) {
    val (s, c) = slot(limits(assignmentIntervalMs = 300))(_.willPoll(Records(), Records(record(1), record(2))))
    assert(s.joinsWithNextPoll(Set("t")))
    assert(offsets(s.pollRound(1, Set("t"), Duration.ofSeconds(30))) == Seq(1, 2))
    assert(c.subscriptions == Seq(Set("t")) && !s.joinsWithNextPoll(Set("t")))
    // A zero-timeout poll first; the rest of the first poll's wait is 1 s at least (300 ms + 200 ms is less).
    assert(c.pollTimeouts.head == Duration.ZERO && c.pollTimeouts(1).compareTo(second) <= 0)
    assert(s.holds(1) && s.heldCount(1) == 2 && s.heldFor(1).map(offsets).contains(Seq(1, 2)))
    assert(s.topicIds(1) == Map(new TopicPartition("t", 0) -> topicId("t").toString))
    // Holding: a second poll before the round is settled is a bug, not a round.
    intercept[IllegalStateException](s.pollRound(2, Set("t"), second))
  }

  test(
    "Holding to Idle: settling ACCEPTs a committed round as marked, RELEASEs an uncommitted one or one left behind"
  ) {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2), record(3))))
    s.pollRound(1, Set("t"), second)
    assert(s.settle(committedThrough = 0, AcknowledgementMarks.None) == Settlement(
      accepted = 0,
      released = 3,
      rejected = 0
    ))
    assert(!s.holds(1))
    c.willPoll(Records(record(4), record(5), record(6)))
    s.pollRound(2, Set("t"), second)
    val marks = AcknowledgementMarks(
      2,
      Map(
        RecordCoordinates("t", 0, 5) -> AcknowledgeType.RELEASE,
        RecordCoordinates("t", 0, 6) -> AcknowledgeType.REJECT
      )
    )
    assert(s.settle(committedThrough = 2, marks) == Settlement(accepted = 1, released = 1, rejected = 1))
    assert(s.flush(second).contains(Set.empty))
    assert(appliedOf(c, AcknowledgeType.RELEASE) == Seq(1, 2, 3, 5) && appliedOf(c, AcknowledgeType.REJECT) == Seq(6))
    c.willPoll(Records(record(7)))
    s.pollRound(3, Set("t"), second)
    assert(
      s.settle(committedThrough = 3, AcknowledgementMarks.None, atHome = false).released == 1,
      "a consumer left behind"
    )
  }

  test(
    "Holding to Holding: records delivered before are ACCEPTed at once, records another slot logged first are hidden"
  ) {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2), record(3))))
    s.pollRound(4, Set("t"), second)
    assert(offsets(s.acceptDelivered(4, Set(RecordCoordinates("t", 0, 1)))) == Seq(2, 3))
    assert(appliedOf(c, AcknowledgeType.ACCEPT) == Seq(1), "sent at once")
    assert(offsets(s.hide(4, Set(RecordCoordinates("t", 0, 3)))) == Seq(2))
    assert(s.heldCount(4) == 2 && s.heldFor(4).map(offsets).contains(Seq(2)), "hidden, still held")
    assert(
      s.settle(committedThrough = 4, AcknowledgementMarks.None).accepted == 2,
      "hidden records settle with the round"
    )
    intercept[IllegalStateException](s.hide(4, Set.empty)) // not held any more
  }

  test(
    "after-log, Holding to Holding: a part is ACCEPTed and sent once logged, and the round keeps handing it out"
  ) {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2), record(3))))
    s.pollRound(9, Set("t"), second, inParts = true)
    assert(offsets(s.hide(9, Set(RecordCoordinates("t", 0, 2)))) == Seq(1, 3))
    intercept[IllegalStateException](s.pollPart(9, second)) // the part is neither logged nor accepted yet
    assert(s.acceptLogged(9, second) == 3, "a hidden record is logged by an earlier part: ACCEPTed too")
    assert(appliedOf(c, AcknowledgeType.ACCEPT) == Seq(1, 2, 3), "sent at once, not with the next poll")
    assert(s.heldCount(9) == 0 && s.heldFor(9).map(offsets).contains(Seq(1, 3)))

    c.willPoll(Records(record(4)), Records())
    assert(offsets(s.pollPart(9, second)) == Seq(4))
    assert(s.heldCount(9) == 1 && s.heldFor(9).map(offsets).contains(Seq(1, 3, 4)))
    s.acceptLogged(9, second)
    assert(s.pollPart(9, Duration.ofMillis(20)).isEmpty)
    assert(s.heldFor(9).map(offsets).contains(Seq(1, 3, 4)), "an evaluation again returns every part")
    assert(
      s.settle(committedThrough = 9, AcknowledgementMarks.None) == Settlement(0, 0, 0) && !s.holds(9),
      "nothing left to settle"
    )
    assert(appliedOf(c, AcknowledgeType.ACCEPT) == Seq(1, 2, 3, 4) && appliedOf(c, AcknowledgeType.RELEASE).isEmpty)
    intercept[IllegalStateException](s.pollPart(9, second)) // the round is over
  }

  test("after-log: a part another attempt logged first is RELEASEd; the parts accepted before stay accepted") {
    val (s, c) = slot()(_.willPoll(Records(record(1)), Records(record(2))))
    s.pollRound(10, Set("t"), second, inParts = true)
    s.acceptLogged(10, second)
    assert(offsets(s.pollPart(10, second)) == Seq(2))
    assert(offsets(s.releaseRound(10, second)) == Seq(2))
    assert(appliedOf(c, AcknowledgeType.ACCEPT) == Seq(1) && appliedOf(c, AcknowledgeType.RELEASE) == Seq(2))
    assert(!s.holds(10), "an evaluation again reads the round back from the log")
  }

  test("after-log: a part polled and never logged is RELEASEd when its round settles, though the round committed") {
    val (s, c) = slot()(_.willPoll(Records(record(1)), Records(record(2), record(3))))
    s.pollRound(11, Set("t"), second, inParts = true)
    s.acceptLogged(11, second)
    s.pollPart(11, second) // its task fails before the part's write: the retry elsewhere seals the round before it
    assert(s.settle(committedThrough = 11, AcknowledgementMarks.None) == Settlement(0, 2, 0))
    s.flush(second)
    assert(appliedOf(c, AcknowledgeType.ACCEPT) == Seq(1) && appliedOf(c, AcknowledgeType.RELEASE) == Seq(2, 3))
  }

  test("after-log: a part's poll that fails leaves the round held with its parts, for an evaluation again") {
    val (s, c) = slot()(_.willPoll(Records(record(1)), Throws(new KafkaException("broker gone"))))
    s.pollRound(12, Set("t"), second, inParts = true)
    s.acceptLogged(12, second)
    intercept[KafkaException](s.pollPart(12, second))
    assert(s.heldFor(12).map(offsets).contains(Seq(1)) && s.heldCount(12) == 0)
  }

  test("a transition asked of a state it does not accept throws, and leaves the slot where it was") {
    val (s, _) = slot()(_.willPoll(Records(record(1))))
    intercept[IllegalStateException](s.pollPart(13, second)) // Idle: no round to poll a part of
    s.pollRound(13, Set("t"), second)
    intercept[IllegalStateException](s.pollRound(14, Set("t"), second)) // Holding: settle first
    assert(s.heldFor(13).map(offsets).contains(Seq(1)))
    s.close(committedThrough = 13, AcknowledgementMarks.None, second)
    intercept[IllegalStateException](s.settle(committedThrough = 13, AcknowledgementMarks.None))
  }

  test(
    "real-time, Holding to Holding: a poll's processed records are ACCEPTed, the rest RELEASEd, with the next poll"
  ) {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2), record(3)), Records(record(4))))
    s.pollRound(14, Set("t"), second, inParts = true)
    assert(s.acceptProcessed(14, processed = 2) == 2)
    assert(c.applied.isEmpty, "marked, sent with the next poll")
    assert(offsets(s.pollPart(14, second)) == Seq(4))
    assert(appliedOf(c, AcknowledgeType.ACCEPT) == Seq(1, 2) && appliedOf(c, AcknowledgeType.RELEASE) == Seq(3))
    assert(s.heldFor(14).map(offsets).contains(Seq(4)), "the round keeps none of the acknowledged records")
    s.acceptProcessed(14, processed = 0) // the task failed: nothing it handed out counts as processed
    s.flush(second)
    assert(appliedOf(c, AcknowledgeType.RELEASE) == Seq(3, 4))
  }

  test("Holding to Idle: a round the batch does not read is released and sent") {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2))))
    s.pollRound(5, Set("t"), second)
    assert(offsets(s.releaseRound(5, second)) == Seq(1, 2))
    assert(!s.holds(5) && appliedOf(c, AcknowledgeType.RELEASE) == Seq(1, 2))
    assert(s.releaseRound(5, second).isEmpty, "nothing left to release")
  }

  test(
    "Holding to Holding with records ahead: the renewer takes in what the background fetch brought after an empty round"
  ) {
    val (s, c) = slot(limits(lockMs = 400))(_.willPoll(Records()))
    assert(s.pollRound(6, Set("t"), Duration.ofMillis(50)).isEmpty)
    c.willPoll(Records(record(8), record(9)))
    Thread.sleep(120) // a quarter of the lock, not half
    s.renewLocksIfDue()
    assert(s.awaitsTask(committedThrough = 6), "records ahead wait for the next round")
    s.settle(committedThrough = 6, AcknowledgementMarks.None)
    val polls = c.pollTimeouts.size
    assert(offsets(s.pollRound(7, Set("t"), second)) == Seq(8, 9))
    assert(c.pollTimeouts.size == polls, "handed out without a poll")
  }

  test(
    "Holding, renewed: RENEW, commit, poll; a partition refused, or no answer in time, leaves its records unlocked"
  ) {
    val (s, c) = slot(limits(lockMs = 100))(_.willPoll(Records(record(1), record(2, topic = "u"))))
    // The poll takes longer than half the lock, as on a loaded machine: the round renews before it holds.
    var slowPoll = true
    c.onPoll = () => if (slowPoll) { slowPoll = false; Thread.sleep(70) }
    s.pollRound(1, Set("t", "u"), second)
    assert(appliedOf(c, AcknowledgeType.RENEW).sorted == Seq(1, 2))
    assert(s.drainAcknowledgementEvents() == AcknowledgementEvents(renewed = 2, expired = 0, failed = 0))
    c.applied.clear()
    Thread.sleep(60)
    c.willCommit(Refusing(Map(new TopicPartition("u", 0) -> new InvalidRecordStateException("expired"))))
    s.renewLocksIfDue()
    assert(appliedOf(c, AcknowledgeType.RENEW) == Seq(1))
    assert(s.drainAcknowledgementEvents() == AcknowledgementEvents(renewed = 1, expired = 1, failed = 0))
    assert(s.heldFor(1).map(offsets).contains(Seq(1, 2)), "read again, the round still has both")
    Thread.sleep(60)
    c.willCommit(NoAnswer)
    s.renewLocksIfDue() // the broker does not answer: the renewal renewed nothing the slot knows of
    assert(
      s.drainAcknowledgementEvents() == AcknowledgementEvents(renewed = 0, expired = 1, failed = 0),
      "counted at once, whatever a late answer says"
    )
    assert(
      s.settle(committedThrough = 1, AcknowledgementMarks.None) == Settlement(0, 0, 0),
      "nothing held to acknowledge"
    )
    assert(s.heldFor(1).isEmpty)
  }

  test("a lock that expired before the settlement: the records the client no longer holds are skipped, not thrown on") {
    val (s, c) = slot(limits(lockMs = 100))(_.willPoll(Records(record(1), record(2))))
    s.pollRound(1, Set("t"), second)
    // The client took the records out for a renewal the slot never heard the end of (its commit threw).
    s.heldFor(1).get.forEach(r => c.acknowledge(r, AcknowledgeType.RENEW))
    c.willCommit(NoAnswer)
    c.commit(second)
    assert(s.settle(committedThrough = 1, AcknowledgementMarks.None) == Settlement(0, 0, 0))
    assert(!s.holds(1))
    assert(s.drainAcknowledgementEvents().expired == 2, "counted as locks lost")
  }

  test("a commit whose callback reports errors: an expired lock counts as such, another refusal as failed") {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2, topic = "u"))))
    s.pollRound(1, Set("t", "u"), second)
    s.settle(committedThrough = 1, AcknowledgementMarks.None)
    c.willCommit(Refusing(Map(
      new TopicPartition("t", 0) -> new InvalidRecordStateException("expired"),
      new TopicPartition("u", 0) -> new KafkaException("not the leader")
    )))
    assert(s.flush(second).contains(Set(new TopicPartition("t", 0), new TopicPartition("u", 0))))
    assert(s.drainAcknowledgementEvents() == AcknowledgementEvents(renewed = 0, expired = 1, failed = 1))
  }

  test(
    "an acknowledgement counts once the broker applied it: refused ones as locks lost or failed, unanswered ones later"
  ) {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2), record(3, topic = "u"), record(4, topic = "v"))))
    s.pollRound(1, Set("t", "u", "v"), second)
    s.settle(
      committedThrough = 1,
      AcknowledgementMarks(1, Map(RecordCoordinates("t", 0, 2) -> AcknowledgeType.RELEASE))
    )
    assert(s.drainAcknowledgementEvents() == AcknowledgementEvents(0, 0, 0), "marked, not sent")
    c.willCommit(Refusing(Map(
      new TopicPartition("u", 0) -> new InvalidRecordStateException("expired"),
      new TopicPartition("v", 0) -> new KafkaException("not the leader")
    )))
    s.flush(second)
    assert(s.drainAcknowledgementEvents() == AcknowledgementEvents(
      0,
      expired = 1,
      failed = 1,
      accepted = 1,
      released = 1
    ))

    c.willPoll(Records(record(5)))
    s.pollRound(2, Set("t", "u", "v"), second)
    s.settle(committedThrough = 2, AcknowledgementMarks.None)
    c.willCommit(NoAnswer)
    assert(s.flush(second).isEmpty)
    assert(s.drainAcknowledgementEvents() == AcknowledgementEvents(0, 0, 0), "no answer yet: nothing applied")
  }

  test(
    "Idle or Holding to Stopped, then Closed: stopping leaves the group and keeps the round for the close to settle"
  ) {
    val (s, c) = slot()(_.willPoll(Records(record(1), record(2))))
    s.pollRound(1, Set("t"), second)
    assert(s.stopFetching().compareTo(Duration.ZERO) > 0, "waits out a fetch the client sent")
    assert(c.subscriptions.last == Set.empty && s.holds(1))
    assert(s.stopFetching() == Duration.ZERO, "already stopped")
    intercept[IllegalStateException](s.pollRound(2, Set("t"), second))
    s.close(committedThrough = 1, AcknowledgementMarks.None, second)
    assert(c.closed && appliedOf(c, AcknowledgeType.ACCEPT) == Seq(1, 2), "settled as it closed")
  }

  test("to TurnedAway: a consumer the full group turns away polls no more, and its slot's next task replaces it") {
    val (s, _) = slot()(_.willPoll(Throws(new GroupMaxSizeReachedException("full"))))
    assert(s.pollRound(1, Set("t"), second).isEmpty)
    assert(s.turnedAwayAsGroupFull)
    intercept[IllegalStateException](s.pollRound(2, Set("t"), second))
  }

  test("to Refused: a consumer the group's ACLs refuse throws the refusal for every later round") {
    val (s, _) = slot()(_.willPoll(Throws(new GroupAuthorizationException("no READ on group g"))))
    val first = intercept[KafkaShareRuntimeException](s.pollRound(1, Set("t"), second))
    assert(first.getCondition == "KAFKA_SHARE_NOT_AUTHORIZED")
    // Kafka's client throws the refusal once; its later polls return nothing. The slot throws it again.
    val again = intercept[KafkaShareRuntimeException](s.pollRound(2, Set("t"), second))
    assert(again.getCondition == "KAFKA_SHARE_NOT_AUTHORIZED" && again.getMessage.contains("no READ on group g"))
  }

  test(
    "a task failing mid-round: a poll that throws leaves the slot idle and subscribed, for the retry to poll again"
  ) {
    val (s, c) = slot()(_.willPoll(Throws(new KafkaException("the broker went away")), Records(record(1))))
    intercept[KafkaException](s.pollRound(1, Set("t"), second))
    assert(!s.holds(1))
    assert(offsets(s.pollRound(1, Set("t"), second)) == Seq(1))
    assert(c.subscriptions == Seq(Set("t")), "subscribed once")
  }

  test("a close during a poll waits for the poll, then settles its round") {
    val polling = new CountDownLatch(1)
    val release = new CountDownLatch(1)
    val (s, c) = slot()(_.willPoll(Records(record(1))))
    c.onPoll = () => { polling.countDown(); release.await(10, TimeUnit.SECONDS) } // the poll waits for the test
    val pollThread = Future(s.pollRound(1, Set("t"), Duration.ofSeconds(5)))
    assert(polling.await(10, TimeUnit.SECONDS))
    val closing = Future(s.close(committedThrough = -1L, AcknowledgementMarks.None, second))
    Thread.sleep(100)
    assert(!closing.isCompleted, "closed while polling")
    release.countDown()
    assert(offsets(Await.result(pollThread, 10.seconds)) == Seq(1))
    Await.result(closing, 10.seconds)
    assert(c.closed && appliedOf(c, AcknowledgeType.RELEASE) == Seq(1), "the round it polled, released as it closed")
  }

  test("a late attempt is fenced: a round is logged only while its run runs and has not committed it") {
    def fenced(lookUp: RunLookUp) = RecordsLogPath.mayLog("run", 3, round = 5, lookUp).isLeft
    assert(!fenced(RunLookUp.Running(RunState(committedThrough = 4, homes = Map.empty))))
    assert(fenced(RunLookUp.Running(RunState(committedThrough = 5, homes = Map.empty))))
    assert(fenced(RunLookUp.Stopped(RunState(4, Map.empty), AcknowledgementMarks.None.plain)))
    assert(fenced(RunLookUp.Unanswered))
    assert(!fenced(RunLookUp.Unknown), "another copy of the connector answers: it cannot say")
  }

  test("a slot borrowed from another thread of the same task attempt is that attempt's, and another attempt waits") {
    var attempt: Any = "attempt 7"
    val lock = new SlotLock(() => attempt)
    assert(lock.tryLock())
    // Spark 3.5 reads a Python UDF's input on a thread of its own: the same attempt, another thread.
    assert(Await.result(Future(lock.isHeldByCaller), 5.seconds))
    attempt = "attempt 8"
    assert(!lock.tryLock() && !lock.tryLock(50, TimeUnit.MILLISECONDS))
    attempt = "attempt 7"
    Await.result(Future(lock.unlock()), 5.seconds) // the task's completion gives it back from its own thread
    attempt = "attempt 8"
    assert(lock.tryLock())
  }
}
