package io.github.sparkkafkashare.planning

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, RecordCoordinates}
import io.github.sparkkafkashare.executor.{KafkaShareInputPartition, KafkaShareReplayPartition, SlotLocations, SlotRead}
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.kafka.clients.consumer.AcknowledgeType
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.util.CaseInsensitiveStringMap
import org.scalatest.funsuite.AnyFunSuite

/**
 * The stream's planning of a run's rounds ([[RoundPlanner]]), as Spark calls it: the round
 * `latestOffset` offers and its plan, a plan asked for again, a re-run batch's plan, the explicit
 * marks a commit keeps, and the round a stop settles. A scripted [[GroupAdmin]] and a clock moved by
 * hand stand in for Kafka and time; the tasks are played as counters and slot reads: no broker, no
 * Spark application.
 */
class RoundPlannerSuite extends AnyFunSuite {
  private val t0 = new TopicPartition("t", 0)

  private final class Run(extra: Map[String, String] = Map.empty) {
    val options: KafkaShareSourceOptions = KafkaShareSourceOptions.parse(new CaseInsensitiveStringMap((Map(
      "kafka.bootstrap.servers" -> "b:9092",
      "kafka.share.group.id" -> "g",
      "subscribe" -> "t",
      "kafka.share.parallelism" -> "2"
    ) ++ extra).asJava))
    val admin = new FakeGroupAdmin
    admin.partitionCounts = Map("t" -> 1)
    admin.lagsNow = Map(t0 -> Some(0L))
    admin.endOffsetsNow = Map(t0 -> 100L)
    admin.assigned = Set(t0)
    val clock = new ManualClock
    val counters = TestCounters()
    val slots = new SlotLocations()
    val planner = new RoundPlanner(
      options,
      "run",
      parallelism = 2,
      admin,
      new GroupFollower(admin, options, 2, "run", clock),
      counters,
      slots,
      recordsLog = None,
      reRunsAfterLog = () => false,
      executors = () => Seq("executor_a_1", "executor_b_2"),
      liveExecutors = () => Set("executor_a_1", "executor_b_2"),
      countedOutsideTasks = () => Map.empty,
      triggersBackToBack = false,
      clock
    )

    def slotPartitions(parts: Array[_]): Seq[KafkaShareInputPartition] =
      parts.toSeq.map(_.asInstanceOf[KafkaShareInputPartition])
  }

  /** User code REJECTs the record at `offset` of t-0. */
  private def rejected(offset: Long): Map[RecordCoordinates, AcknowledgeType] =
    Map(RecordCoordinates("t", 0, offset) -> AcknowledgeType.REJECT)

  test("latestOffset offers a round, its plan has a partition per slot that polls, and a second plan is the same") {
    val run = new Run
    assert(run.planner.offer(0L).contains(1L), "a run's first round polls")
    assert(run.planner.current.offeredRounds == Map(1L -> true))
    val plan = run.planner.plan(0L, 1L, readsEndOffsets = true)
    val slots = run.slotPartitions(plan)
    assert(slots.map(_.slot) == Seq(0, 1))
    assert(slots.forall(p => p.round == 1L && p.committedThrough == 0L && p.poll && p.topics == Set("t")))
    assert(slots.map(_.location) == Seq(Some("executor_a_1"), Some("executor_b_2")), "slots spread over executors")
    assert(run.planner.current.offeredRounds.isEmpty)
    val calls = Seq("subscribedTopics", "lags", "endOffsets").map(run.admin.callsOf)
    // foreachBatch plans the running batch's DataFrame again.
    assert(run.planner.plan(0L, 1L, readsEndOffsets = true) eq plan)
    assert(Seq("subscribedTopics", "lags", "endOffsets").map(run.admin.callsOf) == calls, "nothing looked up again")
    // The round ran and found nothing, with no backlog: no round is offered, and the last plan stays.
    run.slots.add(SlotRead(0, 1, "executor_a_1"))
    run.slots.add(SlotRead(1, 1, "executor_b_2"))
    assert(run.planner.offer(1L).isEmpty)
    assert(run.planner.current.lastPlanned.map(_.round).contains(1L))
  }

  test("after a round that acquired records the next round polls with the short timeout of flowing records") {
    val run = new Run
    run.planner.offer(0L)
    run.planner.plan(0L, 1L, readsEndOffsets = true)
    run.counters.acquired.add(10)
    assert(run.planner.offer(1L).contains(2L))
    val slots = run.slotPartitions(run.planner.plan(1L, 2L, readsEndOffsets = true))
    assert(slots.forall(p => p.poll && p.pollTimeoutMs == RoundPlanner.FlowingPollTimeoutMs))
    assert(run.planner.current.lastPlanned.exists(_.roundStart.isEmpty), "no end offsets while records flow")
  }

  test("a batch this run did not offer (re-run from the offset log) is planned as a replay: it does not poll") {
    val run = new Run
    val calls = run.admin.callsOf("subscribedTopics") // the run's start lists the topics once
    val slots = run.slotPartitions(run.planner.plan(4L, 5L, readsEndOffsets = true))
    assert(slots.map(_.slot) == Seq(0, 1))
    assert(slots.forall(p => !p.poll && p.round == 5L && p.committedThrough == 4L))
    assert(run.admin.callsOf("subscribedTopics") == calls && run.admin.callsOf("endOffsets") == 0, "nothing looked up")
    assert(run.planner.current.lastPlanned.exists(p => p.round == 5L && p.roundStart.isEmpty))
  }

  test("under two-phase-commit a re-run batch reads back what it logged: one partition even with nothing logged") {
    val run = new Run(Map("kafka.share.exactly.once.strategy" -> "two-phase-commit"))
    val calls = run.admin.callsOf("subscribedTopics")
    val plan = run.planner.plan(4L, 5L, readsEndOffsets = true)
    assert(plan.toSeq.collect { case p: KafkaShareReplayPartition => (p.round, p.slot, p.records) } == Seq((
      5L,
      0,
      Nil
    )))
    assert(run.admin.callsOf("subscribedTopics") == calls)
  }

  test("a commit drops the marks of rounds below it that no slot holds, and keeps those a slot still holds") {
    val run = new Run(Map("kafka.share.acknowledgment.mode" -> "explicit"))
    (1L to 3L).foreach(round => run.planner.recordMarks(round, rejected(round)))
    // Slot 0's task did not run since round 1: its consumer still holds that round's records.
    run.slots.add(SlotRead(0, 1, "executor_a_1"))
    run.slots.add(SlotRead(1, 3, "executor_b_2"))
    assert(run.planner.commit(3L) == 3L)
    assert(run.planner.marks(1L) == AcknowledgementMarks(1L, rejected(1L)), "held by slot 0: kept")
    assert(run.planner.marks(2L) == AcknowledgementMarks(2L, Map.empty), "below the committed round, held by none")
    assert(run.planner.marks(3L) == AcknowledgementMarks(3L, rejected(3L)), "the committed round's own")
    assert(run.planner.commit(2L) == 3L, "a commit never moves the committed round back")
    // The next round carries each slot the marks of the round it holds.
    run.planner.offer(3L)
    val slots = run.slotPartitions(run.planner.plan(3L, 4L, readsEndOffsets = true))
    assert(slots.map(_.marks.round) == Seq(1L, 3L))
  }

  test("a stop settles the highest committed round, this run's or the query's own record, with its marks") {
    val run = new Run(Map("kafka.share.acknowledgment.mode" -> "explicit"))
    assert(run.planner.settledAtStop(None) == ((-1L, AcknowledgementMarks.None)), "nothing committed")
    run.planner.recordMarks(3L, rejected(7L))
    run.planner.commit(3L)
    assert(run.planner.settledAtStop(None) == ((3L, AcknowledgementMarks(3L, rejected(7L)))))
    assert(run.planner.settledAtStop(Some(2L))._1 == 3L)
    assert(run.planner.settledAtStop(Some(5L)) == ((5L, AcknowledgementMarks(5L, Map.empty))))
  }
}
