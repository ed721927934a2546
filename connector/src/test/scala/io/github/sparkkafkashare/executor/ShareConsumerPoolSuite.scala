package io.github.sparkkafkashare.executor

import java.nio.file.Files
import java.time.Duration
import java.util.UUID
import java.util.concurrent.TimeUnit.{NANOSECONDS, SECONDS}

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.LocalKafka
import io.github.sparkkafkashare.UsesLocalServices
import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, LoggedRecord, RecordCoordinates, RoundRecordsLog}
import io.github.sparkkafkashare.metrics.KafkaShareTaskMetric.{Accepted, AcknowledgementsFailed, Acquired, Joined, Released}
import io.github.sparkkafkashare.runs.{RoundMarks, RunLookUp, RunState}
import org.apache.hadoop.conf.Configuration
import org.apache.kafka.clients.admin.{Admin, AlterConfigOp, ConfigEntry, NewTopic}
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerConfig, KafkaShareConsumer}
import org.apache.kafka.clients.producer.{KafkaProducer, ProducerRecord}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.config.ConfigResource
import org.apache.kafka.common.serialization.{ByteArrayDeserializer, StringSerializer}
import org.apache.spark.{SparkConf, SparkContext}
import org.apache.spark.sql.kafkashare.{ExecutorLocality, QueryRunRegistry}
import org.apache.spark.util.SerializableConfiguration
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite

/**
 * The consumer pool against the local broker (`make kafka-up`, or KAFKA_BOOTSTRAP_SERVERS), with a
 * local SparkContext for the driver's registry of query runs. A consumer left behind on an executor
 * (Spark now runs its slot's tasks elsewhere) hands what it holds of committed rounds back to the
 * group, from the next task of its query there or from the janitor, while it would otherwise renew
 * those locks until it is closed; and the janitor keeps the records of a batch that outlasts the
 * idle timeout locked while its query runs; and a slot whose renewal the broker applies only in part
 * still reads its whole round. Which records another member of the group can then acquire is the
 * broker's answer.
 */
@UsesLocalServices
class ShareConsumerPoolSuite extends AnyFunSuite with BeforeAndAfterAll {

  private val bootstrap = sys.env.getOrElse("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")
  private lazy val admin = Admin.create(Map[String, Object]("bootstrap.servers" -> bootstrap).asJava)
  private lazy val spark = new SparkContext(new SparkConf().setMaster("local[1]").setAppName("ShareConsumerPoolSuite")
    .set("spark.ui.enabled", "false"))

  /** This JVM as the pool's janitor names it, so that the janitor's own rounds act as the test's calls do. */
  private lazy val here = { spark; ExecutorLocality.currentExecutor() }
  private val elsewhere = "executor_host_2"

  override def afterAll(): Unit =
    try admin.close()
    finally spark.stop()

  /** A one-partition topic of `n` records, and a group that reads it from the start. */
  private def topicAndGroup(n: Int): (String, String) = {
    val topic = newTopic("left-behind", n)
    (topic, newGroup(s"g-$topic"))
  }

  /** A new one-partition topic of `n` records. */
  private def newTopic(prefix: String, n: Int): String = {
    val topic = s"$prefix-${UUID.randomUUID().toString.take(8)}"
    admin.createTopics(Seq(new NewTopic(topic, 1, 1.toShort)).asJava).all().get(30, SECONDS)
    produce(topic, n)
    topic
  }

  /** A share group that reads from the start, with `configs` (group configs) besides. */
  private def newGroup(group: String, configs: (String, String)*): String = {
    val ops = (configs :+ ("share.auto.offset.reset" -> "earliest")).map { case (name, value) =>
      new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET)
    }
    val resource = new ConfigResource(ConfigResource.Type.GROUP, group)
    admin.incrementalAlterConfigs(Map(resource -> ops.asJavaCollection).asJava).all().get(30, SECONDS)
    group
  }

  /** `n` records in one record batch (sent at close), which one fetch acquires whole. */
  private def produce(topic: String, n: Int): Unit = {
    val producer = new KafkaProducer[String, String](
      Map[String, Object]("bootstrap.servers" -> bootstrap, "linger.ms" -> "60000").asJava,
      new StringSerializer,
      new StringSerializer
    )
    try (0 until n).foreach(i => producer.send(new ProducerRecord(topic, s"r-$i")))
    finally producer.close()
  }

  private def config(group: String, clientId: String, more: (String, Object)*): java.util.Map[String, Object] =
    (Map[String, Object](
      "bootstrap.servers" -> bootstrap,
      "group.id" -> group,
      "client.id" -> clientId,
      "share.acknowledgement.mode" -> "explicit"
    ) ++ more).asJava

  /** Slot 1 of a run polls `round`, and its task gives it back: the offsets it now holds. */
  private def slotHolding(run: String, round: Long, topic: String, group: String): Set[Long] = {
    val slot = ShareConsumerPool.borrow(SlotKey(run, 1), config(group, s"$run-1"), WholeTimeoutFirstPoll)
    try slot.pollRound(round, Set(topic), Duration.ofSeconds(30)).asScala.map(_.offset()).toSet
    finally ShareConsumerPool.giveBack(slot)
  }

  /** The group's limits as a query's driver reads them: Kafka's defaults, with `assignmentIntervalMs`. */
  private def limits(assignmentIntervalMs: Long) =
    GroupLimits(renewAllowed = true, recordLocksPerPartition = 2000, lockDurationMs = 30000L, assignmentIntervalMs)

  /**
   * Limits with which a consumer's first poll waits its whole timeout, as its later polls do: these
   * groups leave starting their partitions to Kafka, which does so seconds after the first member
   * joins, so a first poll that ends just past the assignment interval, as a query's does, could find
   * no records. The interval is longer than any timeout here.
   */
  private val WholeTimeoutFirstPoll = limits(assignmentIntervalMs = 60000L)

  /** The driver's note that the run stopped with `committedThrough`, slot 1 last at home here, no marks. */
  private def markStopped(
      run: String,
      committedThrough: Long = -1L,
      marks: AcknowledgementMarks = AcknowledgementMarks.None
  ): Unit =
    QueryRunRegistry.markStopped(run, RunState(committedThrough, Map(1 -> here)), marks.plain)

  private def deleteTopic(topic: String): Unit = LocalKafka.deleteTopic(admin, topic)

  private def memberClientIds(group: String): Set[String] =
    admin.describeShareGroups(Seq(group).asJava).describedGroups().get(group).get(30, SECONDS)
      .members().asScala.map(_.clientId()).toSet

  /**
   * What another member of the group acquires within `seconds`, by offset, with its delivery count.
   * Once it has `expected` records it polls [[BeyondExpected]] more, not the whole time: records that
   * should not come back would be available as soon as those that should, and arrive with them.
   */
  private def acquiredByAnotherMember(
      topic: String,
      group: String,
      seconds: Int,
      expected: Int = Int.MaxValue
  ): Map[Long, Int] = {
    val other =
      new KafkaShareConsumer(config(group, "other-member"), new ByteArrayDeserializer, new ByteArrayDeserializer)
    try {
      other.subscribe(Seq(topic).asJava)
      var deadline = System.nanoTime() + SECONDS.toNanos(seconds)
      var acquired = Map.empty[Long, Int]
      while (System.nanoTime() < deadline) {
        other.poll(Duration.ofMillis(200)).forEach { r =>
          acquired += r.offset() -> KafkaShareRows.deliveryCount(r)
          other.acknowledge(r, AcknowledgeType.ACCEPT)
        }
        if (acquired.size >= expected) deadline = math.min(deadline, System.nanoTime() + BeyondExpected.toNanos)
      }
      acquired
    } finally other.close()
  }

  private val BeyondExpected = Duration.ofSeconds(1)

  /** Runs `body(run, topic, group, held)` once slot 1 of a new run holds records of `round`; closes the run after. */
  private def withSlotHolding(round: Long)(body: (String, String, String, Set[Long]) => Unit): Unit = {
    val (topic, group) = topicAndGroup(100)
    val run = UUID.randomUUID().toString
    try {
      val held = slotHolding(run, round, topic, group)
      assert(held.nonEmpty)
      body(run, topic, group, held)
    } finally {
      ShareConsumerPool.closeRun(run, -1L, AcknowledgementMarks.None, Map.empty, here)
      markStopped(run)
    }
  }

  test("a consumer left behind releases what it holds of a committed round, and stays open for its slot") {
    withSlotHolding(round = 0) { (run, topic, group, held) =>
      val counted = ShareConsumerPool.releaseLeftBehind(run, Map(1 -> elsewhere), here, committedThrough = 0)
      assert(counted == Map(Released -> held.size.toLong), "released, and every release applied")
      // The locks last 30 s and would be renewed: only the release lets another member have them now.
      val redelivered = acquiredByAnotherMember(topic, group, seconds = 15, expected = held.size)
      assert(held.subsetOf(redelivered.keySet))
      assert(held.forall(offset => redelivered(offset) == 2), redelivered)
      assert(ShareConsumerPool.releaseLeftBehind(run, Map(1 -> elsewhere), here, committedThrough = 0).isEmpty)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 0) === false)
      assert(memberClientIds(group).contains(s"$run-1"), "the consumer stays a member")
      val again = ShareConsumerPool.borrow(SlotKey(run, 1), config(group, "unused"), WholeTimeoutFirstPoll)
      try {
        assert(again.config.get(ConsumerConfig.CLIENT_ID_CONFIG) == s"$run-1", "the slot's own consumer, not a new one")
        assert(again.heldFor(0).isEmpty)
      } finally ShareConsumerPool.giveBack(again)
    }
  }

  test(
    "a task logs its round while the driver runs its query run and has not committed the round, and not once the run stopped"
  ) {
    val run = s"fenced-${UUID.randomUUID()}"
    val log = new RoundRecordsLog(
      Files.createTempDirectory("fenced").toString,
      new SerializableConfiguration(new Configuration())
    )
    val records = Seq(LoggedRecord(RecordCoordinates("t", 0, 1), deliveryCount = 1))
    def write(round: Long) = log.writeFirst(round, 0, records, () => RecordsLogPath.fenceLateAttempt(run, 0, round))
    QueryRunRegistry.publish(run, RunState(committedThrough = -1L, homes = Map.empty))
    assert(write(1).isEmpty && log.read(1, 0).contains(records))
    // An attempt Spark wrote off that wakes after its round committed (and the round's files were pruned).
    QueryRunRegistry.publish(run, RunState(committedThrough = 3L, homes = Map.empty))
    val late = intercept[IllegalStateException](write(3))
    assert(late.getMessage.contains(s"query run $run committed through round 3"))
    assert(log.read(3, 0).isEmpty, "a late attempt logged a committed round")
    assert(write(4).isEmpty && log.read(4, 0).contains(records))
    markStopped(run) // a task that outlived its run (the stop's closing job gave up on its busy executor)
    val refused = intercept[IllegalStateException](write(2))
    assert(refused.getMessage.contains(s"query run $run is not running"))
    assert(log.read(2, 0).isEmpty, "a run that stopped logged a round")
  }

  test("a left-behind consumer reports, once, what a failed task of its slot counted here, and what it released") {
    withSlotHolding(round = 0) { (run, _, _, held) =>
      // As the failure listener keeps them: Spark dropped the failed task's counts, and its retry ran on
      // another executor, where the slot stayed, so no task of the slot comes back here to report them.
      ShareConsumerPool.keepUnreported(SlotKey(run, 1), Map(Acquired -> held.size.toLong, Joined -> 1L, Accepted -> 7L))
      val counted = ShareConsumerPool.releaseLeftBehind(run, Map(1 -> elsewhere), here, committedThrough = 0)
      // The release cancels the acquisitions in what the run took; the records are counted again when acquired again.
      assert(counted == Map(Released -> held.size.toLong, Acquired -> held.size.toLong, Joined -> 1L, Accepted -> 7L))
      assert(ShareConsumerPool.releaseLeftBehind(run, Map(1 -> elsewhere), here, committedThrough = 0).isEmpty)
      assert(
        ShareConsumerPool.takeUnreported(SlotKey(run, 1)).isEmpty,
        "the slot's next task here would count them again"
      )
    }
  }

  test("keeps what belongs to a batch not yet committed, to a slot at home, or to a slot a task is using") {
    withSlotHolding(round = 1) { (run, topic, group, held) =>
      assert(ShareConsumerPool.releaseLeftBehind(run, Map(1 -> elsewhere), here, committedThrough = 0).isEmpty)
      assert(ShareConsumerPool.releaseLeftBehind(run, Map(1 -> here), here, committedThrough = 1).isEmpty)
      assert(
        ShareConsumerPool.releaseLeftBehind("another-run", Map(1 -> elsewhere), here, committedThrough = 1).isEmpty
      )
      // A task holds the slot: a release from another task skips it, and so does one from the task itself.
      val task = ShareConsumerPool.borrow(SlotKey(run, 1), config(group, "unused"), WholeTimeoutFirstPoll)
      try {
        assert(ShareConsumerPool.releaseLeftBehind(run, Map(1 -> elsewhere), here, committedThrough = 1).isEmpty)
        val fromAnotherTask =
          Future(ShareConsumerPool.releaseLeftBehind(run, Map(1 -> elsewhere), here, committedThrough = 1))
        assert(Await.result(fromAnotherTask, 30.seconds).isEmpty)
      } finally ShareConsumerPool.giveBack(task)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))
      assert(acquiredByAnotherMember(topic, group, seconds = 8).keySet.intersect(held).isEmpty)
    }
  }

  test("a task interrupted as its round fails leaves the round held, for the slot's close to release") {
    withSlotHolding(round = 1) { (run, topic, group, held) =>
      val task = ShareConsumerPool.borrow(SlotKey(run, 1), config(group, "unused"), WholeTimeoutFirstPoll)
      try {
        Thread.currentThread().interrupt() // as Spark interrupts the tasks of a query that stops
        task.releaseRound(1, ShareConsumerPool.CloseTimeout)
        assert(Thread.interrupted(), "the interrupt stays for the task to see")
      } finally ShareConsumerPool.giveBack(task)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))
      assert(acquiredByAnotherMember(topic, group, seconds = 8).keySet.intersect(held).isEmpty)

      ShareConsumerPool.closeRun(run, committedThrough = 0, AcknowledgementMarks.None, Map(1 -> here), here)
      val redelivered = acquiredByAnotherMember(topic, group, seconds = 15, expected = held.size)
      assert(held.subsetOf(redelivered.keySet), "closed, and round 1 went back to the group uncommitted")
      assert(held.forall(offset => redelivered(offset) == 2), redelivered)
    }
  }

  test("acknowledgements the broker does not apply, for another reason than an expired lock, count as failed") {
    withSlotHolding(round = 1) { (run, topic, _, held) =>
      // The broker no longer hosts the topic: a refusal that is not INVALID_RECORD_STATE. (In a running
      // query the usual one is Kafka's client failing acknowledgements of a partition lost in a rebalance.)
      deleteTopic(topic)
      val task = ShareConsumerPool.borrow(SlotKey(run, 1), config("unused", "unused"), WholeTimeoutFirstPoll)
      try {
        assert(task.settle(committedThrough = 1, AcknowledgementMarks.None).accepted == held.size)
        assert(task.flush(Duration.ofSeconds(30)).contains(Set(new TopicPartition(topic, 0))))
        val events = task.drainAcknowledgementEvents()
        assert((events.failed, events.expired) == (held.size.toLong, 0L))
        assert(task.drainAcknowledgementEvents().failed == 0, "reported once")
      } finally ShareConsumerPool.giveBack(task)
    }
  }

  test(
    "the janitor has a left-behind consumer release its committed round and leave the group when no task of its query comes back"
  ) {
    withSlotHolding(round = 0) { (run, topic, group, held) =>
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 0), "the driver does not know the run: nothing to go by")
      QueryRunRegistry.publish(run, RunState(committedThrough = 0, homes = Map(1 -> elsewhere)))
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO)
      assert(!ShareConsumerPool.holdsRound(SlotKey(run, 1), 0))
      // A member keeps partitions assigned to it that no one else may then read.
      eventually(timeout(30.seconds))(assert(!memberClientIds(group).contains(s"$run-1")))
      // reported to the driver's metrics, by a message that arrives shortly
      eventually(timeout(10.seconds))(
        assert(QueryRunRegistry.countedOutsideTasks(run) == Map(Released.name -> held.size.toLong))
      )
      val redelivered = acquiredByAnotherMember(topic, group, seconds = 15, expected = held.size)
      assert(held.subsetOf(redelivered.keySet))
      assert(held.forall(offset => redelivered(offset) == 2), redelivered)
    }
  }

  test("a left-behind consumer's release that the broker does not apply counts as failed, in the run's metrics") {
    withSlotHolding(round = 0) { (run, topic, _, held) =>
      deleteTopic(topic)
      QueryRunRegistry.publish(run, RunState(committedThrough = 0, homes = Map(1 -> elsewhere)))
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO)
      // No task of the slot comes back to report it: the janitor tells the driver. The broker refused the
      // releases, so none counts as released.
      val counted = Map(AcknowledgementsFailed.name -> held.size.toLong)
      eventually(timeout(10.seconds))(assert(QueryRunRegistry.countedOutsideTasks(run) == counted))
    }
  }

  test(
    "the janitor keeps a running batch's records locked past the idle timeout, and lets them go as soon as the run stops"
  ) {
    withSlotHolding(round = 1) { (run, topic, group, held) =>
      QueryRunRegistry.publish(run, RunState(committedThrough = 0, homes = Map(1 -> here)))
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO, idleTimeout = Duration.ZERO)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))
      assert(acquiredByAnotherMember(topic, group, seconds = 8).keySet.intersect(held).isEmpty)
      // A driver that does not know the run (another copy of the connector answered): the idle timeout applies.
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO, lookUp = _ => RunLookUp.Unknown)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))

      markStopped(run, committedThrough = 0) // stopped, and the closing job missed this executor
      assert(QueryRunRegistry.lookUp(run) == RunLookUp.Stopped(RunState(0, Map(1 -> here)), RoundMarks(-1L, Map.empty)))
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO) // at the configured idle timeout, 5 minutes
      assert(!ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))
      eventually(timeout(30.seconds))(assert(!memberClientIds(group).contains(s"$run-1")))
      val redelivered = acquiredByAnotherMember(topic, group, seconds = 15, expected = held.size)
      assert(held.subsetOf(redelivered.keySet), "closed, and what it held went back to the group")
    }
  }

  test(
    "a stopped run's consumer that the closing job missed settles the last committed round as the job would have, marks and all"
  ) {
    withSlotHolding(round = 1) { (run, topic, group, held) =>
      val released = held.min
      val marks = AcknowledgementMarks(1, Map(RecordCoordinates(topic, 0, released) -> AcknowledgeType.RELEASE))
      markStopped(run, committedThrough = 1, marks)
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO)
      assert(!ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))
      eventually(timeout(30.seconds))(assert(!memberClientIds(group).contains(s"$run-1")))
      // Settled by what the janitor alone knew of the slot (nothing committed), every record would come back.
      assert(
        acquiredByAnotherMember(topic, group, seconds = 10, expected = 1) == Map(released -> 2),
        "only the RELEASE-marked record comes back"
      )
    }
  }

  test(
    "as the JVM exits, a stopped run's consumer that the janitor is closing still ACCEPTs the last committed round"
  ) {
    withSlotHolding(round = 1) { (run, topic, group, _) =>
      markStopped(run, committedThrough = 1)
      val janitor = Future(ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO))
      // The janitor has the consumer leave the group, waits out its fetch in flight, then ACCEPTs as it
      // closes: an application ending right after a stop exits in between.
      eventually(timeout(30.seconds), interval(5.millis))(assert(!memberClientIds(group).contains(s"$run-1")))
      ShareConsumerPool.closeAllAtExit()
      assert(!ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))
      // Closed at exit by what the slot alone knew (nothing committed), every record would come back.
      assert(acquiredByAnotherMember(topic, group, seconds = 10).isEmpty, "the committed round was ACCEPTed")
      Await.result(janitor, 30.seconds)
    }
  }

  test(
    "a run's stop does not wait on a task that keeps using a slot: the janitor closes that consumer once the task ends"
  ) {
    withSlotHolding(round = 1) { (run, topic, group, held) =>
      // A task that goes on past its query's stop (user code that ignores the interrupt) holds the slot.
      val taskHolds = new java.util.concurrent.CountDownLatch(1)
      val taskEnds = new java.util.concurrent.CountDownLatch(1)
      val task = Future {
        val slot = ShareConsumerPool.borrow(SlotKey(run, 1), config(group, s"$run-1"), WholeTimeoutFirstPoll)
        taskHolds.countDown()
        taskEnds.await()
        ShareConsumerPool.giveBack(slot)
      }
      taskHolds.await()
      val stop = Future(ShareConsumerPool.closeRun(
        run,
        committedThrough = 1,
        AcknowledgementMarks.None,
        Map(1 -> here),
        here,
        inUseWait = Duration.ofSeconds(1)
      ))
      val closed =
        try Await.result(stop, 20.seconds)
        finally taskEnds.countDown() // a stop that waits fails, not hangs
      assert(closed == 0)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 1), "the task's consumer keeps its records")
      markStopped(run, committedThrough = 1)
      Await.result(task, 30.seconds)
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO)
      assert(!ShareConsumerPool.holdsRound(SlotKey(run, 1), 1))
      eventually(timeout(30.seconds))(assert(!memberClientIds(group).contains(s"$run-1")))
      // Closed as the stop would have closed it: the committed round ACCEPTed, nothing comes back.
      assert(acquiredByAnotherMember(topic, group, seconds = 10).keySet.intersect(held).isEmpty)
    }
  }

  test(
    "the driver remembers the latest stopped runs, the latest few with their marks, and knows nothing of older ones"
  ) {
    val stopped = Seq.fill(QueryRunRegistry.StoppedRunsKept + 1)(UUID.randomUUID().toString)
    val last = RunState(7, Map(0 -> elsewhere))
    val marks = RoundMarks(7, Map(("t", 0, 42L) -> "REJECT"))
    stopped.foreach(QueryRunRegistry.markStopped(_, last, marks))
    assert(QueryRunRegistry.lookUp(stopped.head) == RunLookUp.Unknown)
    assert(QueryRunRegistry.lookUp(stopped.last) == RunLookUp.Stopped(last, marks))
    val withMarks = stopped.takeRight(QueryRunRegistry.StoppedRunsWithMarks)
    assert(QueryRunRegistry.lookUp(withMarks.head) == RunLookUp.Stopped(last, marks))
    // An older run's marked round is no longer taken as committed: its records are RELEASEd, not ACCEPTed.
    assert(QueryRunRegistry.lookUp(stopped(stopped.size - withMarks.size - 1)) ==
      RunLookUp.Stopped(RunState(6, last.homes), RoundMarks(-1L, Map.empty)))
    assert(AcknowledgementMarks.of(marks) == AcknowledgementMarks(
      7,
      Map(RecordCoordinates("t", 0, 42L) -> AcknowledgeType.REJECT)
    ))
    assert(QueryRunRegistry.lookUp(UUID.randomUUID().toString) == RunLookUp.Unknown)
  }

  test(
    "the janitor leaves a committed batch's records to the slot's next task, and keeps a held round when the driver does not answer"
  ) {
    withSlotHolding(round = 1) { (run, topic, group, held) =>
      // Between a batch's commit and the slot's next task: only that task knows the batch's acknowledgement marks.
      QueryRunRegistry.publish(run, RunState(committedThrough = 1, homes = Map(1 -> here)))
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO, idleTimeout = Duration.ZERO)
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 1), "closed before its next task settled it")
      ConsumerJanitor.tidy(
        here,
        unusedFor = Duration.ZERO,
        idleTimeout = Duration.ZERO,
        lookUp = _ => RunLookUp.Unanswered
      )
      assert(ShareConsumerPool.holdsRound(SlotKey(run, 1), 1), "closed although its run may be running")

      val task = ShareConsumerPool.borrow(SlotKey(run, 1), config(group, "unused"), WholeTimeoutFirstPoll)
      try {
        assert(task.settle(committedThrough = 1, AcknowledgementMarks.None).accepted == held.size)
        assert(task.flush(Duration.ofSeconds(30)).contains(Set.empty))
      } finally ShareConsumerPool.giveBack(task)
      // Holding nothing now, it is closed once idle, and leaves the group.
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO, idleTimeout = Duration.ZERO)
      eventually(timeout(30.seconds))(assert(!memberClientIds(group).contains(s"$run-1")))
      assert(
        acquiredByAnotherMember(topic, group, seconds = 8).keySet.intersect(held).isEmpty,
        "accepted, never redelivered"
      )
    }
  }

  test("the janitor keeps records a consumer took in ahead of its next round, after an empty round committed") {
    val (topic, group) = topicAndGroup(0)
    val run = UUID.randomUUID().toString
    val key = SlotKey(run, 1)
    try {
      val slot = ShareConsumerPool.borrow(key, config(group, s"$run-1"), WholeTimeoutFirstPoll)
      try assert(slot.pollRound(1, Set(topic), Duration.ofSeconds(5)).isEmpty)
      finally ShareConsumerPool.giveBack(slot)
      // The consumer fetches on in the background; the pool's renewer takes in what arrives, to keep it locked.
      produce(topic, 100)
      eventually(timeout(30.seconds))(assert(slot.awaitsTask(committedThrough = 1)))
      QueryRunRegistry.publish(run, RunState(committedThrough = 1, homes = Map(1 -> here)))
      ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO, idleTimeout = Duration.ZERO)
      assert(
        acquiredByAnotherMember(topic, group, seconds = 8).isEmpty,
        "closed, and what it took in went back to the group"
      )

      val task = ShareConsumerPool.borrow(key, config(group, "unused"), WholeTimeoutFirstPoll)
      val next =
        try {
          task.settle(committedThrough = 1, AcknowledgementMarks.None) // as a task does before it polls
          task.pollRound(2, Set(topic), Duration.ofSeconds(5)).asScala
        } finally ShareConsumerPool.giveBack(task)
      assert(next.size == 100 && next.forall(r => KafkaShareRows.deliveryCount(r) == 1))
    } finally {
      ShareConsumerPool.closeRun(run, -1L, AcknowledgementMarks.None, Map.empty, here)
      markStopped(run)
    }
  }

  test(
    "a stopped run's consumer releases what it fetched ahead of a round that never came, with one delivery counted"
  ) {
    // Its round finds nothing, so the consumer fetches on in the background; records produced then are
    // acquired, and taken in by the renewer to keep them locked. The run stops before another round.
    val (topic, group) = topicAndGroup(0)
    val run = UUID.randomUUID().toString
    val slot = ShareConsumerPool.borrow(SlotKey(run, 1), config(group, s"$run-1"), WholeTimeoutFirstPoll)
    try assert(slot.pollRound(1, Set(topic), Duration.ofSeconds(5)).isEmpty)
    finally ShareConsumerPool.giveBack(slot)
    produce(topic, 100)
    eventually(timeout(30.seconds))(assert(slot.awaitsTask(committedThrough = 1)))
    assert(ShareConsumerPool.closeRun(run, committedThrough = 1, AcknowledgementMarks.None, Map.empty, here) == 1)
    markStopped(run, committedThrough = 1)
    val redelivered = acquiredByAnotherMember(topic, group, seconds = 10, expected = 100)
    assert(redelivered == (0L until 100L).map(_ -> 2).toMap, "every record fetched ahead, back to the group once")
  }

  test(
    "a stopped run's consumers all stop fetching before any releases, so a released record comes back once, not once a consumer"
  ) {
    // Slot `holder` reads the whole topic in round 1; the other slot's round finds nothing, so its
    // consumer goes on fetching in the background. Round 1 committed with half its records marked
    // RELEASE: whichever consumer is closed first, the other must not acquire those records (Kafka
    // would count a delivery) and release them again as it closes. The run's closing job closes them,
    // or the janitor, when that job missed them; both orders are tried (the janitor's order is the
    // pool's, so one of its two cases meets the order that matters, most times).
    for (closedBy <- Seq("the closing job", "the janitor"); holder <- Seq(0, 1)) {
      val (topic, group) = topicAndGroup(100)
      val run = UUID.randomUUID().toString
      val Seq(holding, fetching) = Seq(holder, 1 - holder).map { s =>
        ShareConsumerPool.borrow(SlotKey(run, s), config(group, s"$run-$s"), WholeTimeoutFirstPoll)
      }
      val released =
        try {
          val round = holding.pollRound(1, Set(topic), Duration.ofSeconds(30)).asScala.map(_.offset())
          assert(round.size == 100)
          assert(fetching.pollRound(1, Set(topic), Duration.ofSeconds(2)).isEmpty)
          round.filter(_ < 50).toSet
        } finally Seq(holding, fetching).foreach(ShareConsumerPool.giveBack)
      val marks =
        AcknowledgementMarks(1, released.map(o => RecordCoordinates(topic, 0, o) -> AcknowledgeType.RELEASE).toMap)
      if (closedBy == "the closing job") {
        assert(ShareConsumerPool.closeRun(run, committedThrough = 1, marks, Map.empty, here) == 2)
        markStopped(run)
      } else {
        markStopped(run, committedThrough = 1, marks)
        ConsumerJanitor.tidy(here, unusedFor = Duration.ZERO, idleTimeout = Duration.ZERO)
        assert(
          ShareConsumerPool.closeRun(run, -1L, AcknowledgementMarks.None, Map.empty, here) == 0,
          "the janitor closed both"
        )
      }
      val redelivered = acquiredByAnotherMember(topic, group, seconds = 10, expected = released.size)
      assert(
        redelivered == released.map(_ -> 2).toMap,
        s"closed by $closedBy, holder slot $holder: the RELEASE-marked records, each delivered once more"
      )
    }
  }

  test(
    "a consumer's first poll waits just past the group's assignment interval, 1 s at least, its later polls their whole timeout"
  ) {
    // A consumer that joins after another gets its partitions with the group's next assignment, in
    // the answer it gets as its first poll returns: waiting longer would hold the first round for
    // nothing. With the interval at 0 it still needs the time to join and fetch.
    for ((interval, least) <- Seq(Duration.ofSeconds(2) -> 2200L, Duration.ZERO -> 1000L)) {
      val (topic, group) = topicAndGroup(0)
      val slot = new ShareConsumerSlot(
        SlotKey(UUID.randomUUID().toString, 1),
        config(group, s"first-poll-$topic"),
        limits(interval.toMillis)
      )
      def emptyRoundMs(round: Long): Long = {
        val started = System.nanoTime()
        assert(slot.pollRound(round, Set(topic), Duration.ofSeconds(8)).isEmpty)
        slot.settle(committedThrough = round, AcknowledgementMarks.None)
        NANOSECONDS.toMillis(System.nanoTime() - started)
      }
      try {
        val (first, second) = (emptyRoundMs(0), emptyRoundMs(1))
        assert(
          first >= least && first < least + 3000,
          s"interval $interval: the first poll took $first ms, not the 8 s timeout"
        )
        assert(second >= 7900, s"interval $interval: the second poll took $second ms, not its whole 8 s timeout")
      } finally slot.close(-1L, AcknowledgementMarks.None, Duration.ofSeconds(30))
    }
  }

  test(
    "a renewal the broker applies in part keeps the round whole for a re-read, and only the renewed records locked"
  ) {
    val (kept, gone) = (newTopic("renewal", 0), newTopic("renewal", 0))
    val lock = 6.seconds
    val group = newGroup(s"g-$kept", "share.record.lock.duration.ms" -> lock.toMillis.toString)
    // The slot alone, without the pool's renewer: the test decides when it renews. Its fetches wait
    // 2 s for data, so that one response brings the records of both topics.
    val fetchesWaiting = config(group, s"renewal-$kept", "fetch.min.bytes" -> "1000000", "fetch.max.wait.ms" -> "2000")
    val slot = new ShareConsumerSlot(
      SlotKey(UUID.randomUUID().toString, 1),
      fetchesWaiting,
      WholeTimeoutFirstPoll.copy(lockDurationMs = lock.toMillis)
    )
    def waitTill(deadline: Deadline): Unit = Thread.sleep(math.max(0L, deadline.timeLeft.toMillis))
    try {
      // An empty round first: the group starts reading both topics, so one poll can bring records of both.
      assert(slot.pollRound(0, Set(kept, gone), Duration.ofSeconds(5)).isEmpty)
      slot.settle(committedThrough = 0, AcknowledgementMarks.None)
      Seq(kept, gone).foreach(produce(_, 50))
      val round = slot.pollRound(1, Set(kept, gone), Duration.ofSeconds(30)).asScala.map(RecordCoordinates.of).toSet
      val acquired = Deadline.now // no earlier than the broker started the locks
      assert(round.map(_.topic) == Set(kept, gone), "one poll brought the records of both topics")
      // The broker no longer hosts one topic: that half of the renewal is refused (those locks are lost), the other applied.
      deleteTopic(gone)
      waitTill(acquired + lock / 2 + 500.millis)
      slot.renewLocksIfDue()
      assert(slot.drainAcknowledgementEvents() == AcknowledgementEvents(renewed = 50, expired = 50, failed = 0))
      // Evaluated again, the batch must read the same records: those whose renewal was refused too.
      val reread = slot.heldFor(1).map(_.asScala.map(RecordCoordinates.of).toSet).getOrElse(Set.empty)
      assert((reread.size, (round -- reread).size) == (100, 0), "re-read: (records, missing)")

      waitTill(acquired + lock + 1.second) // past the first locks: only the renewal holds them now
      assert(slot.settle(committedThrough = 1, AcknowledgementMarks.None).accepted == 50, "only what it still holds")
      assert(slot.flush(Duration.ofSeconds(30)).contains(Set.empty))
      assert(slot.drainAcknowledgementEvents() == AcknowledgementEvents(0, 0, 0, accepted = 50), "every ACCEPT applied")
      assert(acquiredByAnotherMember(kept, group, seconds = 8).isEmpty, "accepted, never redelivered")
    } finally slot.close(-1L, AcknowledgementMarks.None, Duration.ofSeconds(30))
  }
}
