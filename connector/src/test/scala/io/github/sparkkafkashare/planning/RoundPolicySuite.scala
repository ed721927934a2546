package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.executor.{SlotLocations, SlotRead}
import io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics
import io.github.sparkkafkashare.options.Subscription
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.connector.read.InputPartition
import org.scalatest.funsuite.AnyFunSuite

/**
 * When a run offers Spark another round ([[RoundPolicy.nextRound]] over [[PlanningState]]): a run's first round, rounds
 * after rounds that acquired records, the backlog and the partitions taken as quiet, an outage, and
 * the drain of Trigger.AvailableNow with records released or given back by lost executors. The
 * rounds' batches are played by the test, as counters and slot reads their tasks would report, over
 * a scripted [[GroupAdmin]]: no broker, no Spark application.
 */
class RoundPolicySuite extends AnyFunSuite {
  private val t0 = new TopicPartition("t", 0)

  /**
   * One run of a query over topic `t` (one partition, `t0`), played as the stream plays it: Spark asks
   * for the round after the last committed one ([[next]]), the stream plans the round offered, and
   * its batch runs and commits ([[runs]]).
   */
  private final class Run(
      triggersBackToBack: Boolean = false,
      lockNanos: Long = TimeUnit.SECONDS.toNanos(30),
      maxFailures: Int = 3
  ) {
    val admin = new FakeGroupAdmin
    admin.partitionCounts = Map("t" -> 1)
    admin.lagsNow = Map(t0 -> Some(0L))
    admin.endOffsetsNow = Map(t0 -> 100L)
    admin.assigned = Set(t0)
    val counters: KafkaShareSourceMetrics = TestCounters()
    val clock = new ManualClock
    val backlog = new Backlog(admin, "kafka-share-g-run", () => lockNanos, clock)
    val outage = new OutageTolerance(admin, maxFailures, "g")
    val slots = new SlotLocations()
    var live: Set[String] = Set("a", "b")
    var countedOutsideTasks: Map[String, Long] = Map.empty
    val policy = new RoundPolicy(
      counters,
      backlog,
      outage,
      new SubscribedTopics(admin, Subscription.Topics(Seq("t")), clock),
      slots,
      () => countedOutsideTasks,
      () => live,
      triggersBackToBack,
      clock
    )

    /** The last committed round: the offsets start at round 0. */
    var committed = 0L

    /** The run's planning state, as the stream holds it. */
    var state: PlanningState = PlanningState.Initial

    def lastPlanned: Option[PlannedRound] = state.lastPlanned

    /** The planned round's slots: none unless a test gives it some. */
    var slotCount = 0

    /** Spark asks for the next round; the stream plans the round offered, as its planSlots does. */
    def next(): Option[Boolean] = {
      val (next, offered) = policy.nextRound(state, committed)
      state = next
      offered.foreach { poll =>
        // As the stream plans it: only a round that waits the full poll timeout may show a partition empty.
        val roundStart =
          if (!poll || state.flowing) Map.empty[TopicPartition, Backlog.PartitionAtRoundStart]
          else outage.attempt("reading end offsets")(backlog.roundStart()).getOrElse(Map.empty)
        val partitions = Array.fill[InputPartition](slotCount)(new InputPartition {})
        state =
          state.planned(PlannedRound(
            committed + 1,
            counters.acquired.value,
            counters.joined.value,
            roundStart,
            partitions
          ))
      }
      offered
    }

    /** The backlog the progress report shows. */
    def reportedBacklog(): Option[Long] = {
      val (next, reported) = policy.reportedBacklog(state)
      state = next
      reported
    }

    /** Trigger.AvailableNow starts. */
    def startAvailableNow(): Unit = state = policy.startAvailableNow(state)

    /** The round planned last runs and Spark commits its batch; its tasks report the counts and slot reads given. */
    def runs(acquired: Long = 0, released: Long = 0, joined: Long = 0, reads: Seq[SlotRead] = Nil): Unit = {
      counters.acquired.add(acquired)
      counters.released.add(released)
      counters.joined.add(joined)
      reads.foreach(slots.add)
      committed = lastPlanned.get.round
    }

    def round: Long = lastPlanned.get.round

    /** Makes the backlog, looked up last just now, due for a lookup `inMillis` from now: time passes. */
    def backlogDue(inMillis: Long = 0): Unit =
      clock.advance(SubscribedTopics.RefreshNanos - TimeUnit.MILLISECONDS.toNanos(inMillis))
  }

  private def read(slot: Int, round: Long, executor: String, held: Int = 0) = SlotRead(slot, round, executor, held)

  // The default trigger (and intervals): rounds follow the records.

  test("a run's first round polls, whatever the backlog, without asking Kafka for it") {
    val run = new Run // Kafka would report no backlog
    assert(run.next().contains(true))
    assert(run.admin.callsOf("subscribedTopics") == 0 && run.admin.callsOf("lags") == 0)
    val unreachable = new Run
    unreachable.admin.unreachable = true
    assert(unreachable.next().contains(true))
    assert(!unreachable.outage.ongoing, "no lookup failed")
  }

  test("with no backlog and nothing acquired, no round is offered, and the next call offers none either") {
    val run = new Run
    assert(run.next().contains(true))
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
    assert(run.next().isEmpty)
    assert(run.round == 1)
  }

  test("after a round that acquired records another round polls, even with no backlog, so that it settles them") {
    val run = new Run
    assert(run.next().contains(true))
    run.runs(acquired = 10)
    assert(run.next().contains(true))
    assert(run.admin.callsOf("lags") == 0, "no backlog lookup needed")
    assert(run.state.flowing)
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
    assert(!run.state.flowing)
  }

  test("records left in the backlog, or a backlog Kafka cannot say, plan a round that polls") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(5L))
    run.next()
    run.runs(acquired = 0)
    assert(run.next().contains(true))
    run.admin.lagsNow = Map(t0 -> None)
    run.runs(acquired = 0)
    run.backlogDue()
    assert(run.next().contains(true))
  }

  test("the backlog is asked at most every RefreshNanos: records that arrive meanwhile wait for the next lookup") {
    val run = new Run
    run.next()
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
    run.admin.lagsNow = Map(t0 -> Some(3L))
    assert(run.next().isEmpty)
    assert(run.admin.callsOf("lags") == 1)
    run.backlogDue()
    assert(run.next().contains(true))
    assert(run.admin.callsOf("lags") == 2)
  }

  test("when Spark triggers back to back, a call after one that offered nothing waits for the next backlog lookup") {
    val run = new Run(triggersBackToBack = true)
    run.next()
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
    run.admin.lagsNow = Map(t0 -> Some(3L))
    // The lookup is due 100 ms from now: the call waits for it instead of answering from the last one.
    run.backlogDue(inMillis = 100)
    assert(run.next().contains(true))
    assert(run.admin.callsOf("lags") == 2)
    assert(run.clock.sleptNanos == TimeUnit.MILLISECONDS.toNanos(100), "it waited for the lookup, no longer")
  }

  test("a lag Kafka leaves stale after a round that found nothing in its partition plans no more rounds") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(5L))
    run.next()
    run.runs(acquired = 0) // the first round: its start noted nothing, the lags were not known yet
    assert(run.next().contains(true))
    assert(run.lastPlanned.get.roundStart.keySet == Set(t0))
    run.runs(acquired = 0)
    run.backlogDue()
    assert(run.next().isEmpty, "t0 is quiet: the round that had it found nothing")
    // Records arrive: the end offset moves, and the partition counts again.
    run.admin.endOffsetsNow = Map(t0 -> 103L)
    run.backlogDue()
    assert(run.next().contains(true))
  }

  test("a round in which a consumer joined the group does not make its partitions quiet") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(5L))
    run.next()
    run.runs(acquired = 0)
    assert(run.next().contains(true))
    run.runs(acquired = 0, joined = 1) // its first poll was shorter than the round's timeout
    run.backlogDue()
    assert(run.next().contains(true))
  }

  test("a round with a slot whose task did not run does not make its partitions quiet") {
    val run = new Run
    run.slotCount = 2
    run.admin.lagsNow = Map(t0 -> Some(5L))
    run.next()
    run.runs(acquired = 0, reads = Seq(read(0, 1, "a"), read(1, 1, "b")))
    assert(run.next().contains(true))
    run.runs(acquired = 0, reads = Seq(read(0, 2, "a"))) // slot 1's task did not run: its consumer did not poll
    run.backlogDue()
    assert(run.next().contains(true))
    run.runs(acquired = 0, reads = Seq(read(0, 3, "a"), read(1, 3, "b")))
    run.backlogDue()
    assert(run.next().isEmpty, "every slot read the round, which found nothing")
  }

  test("while the cluster is unreachable rounds keep polling, until fetchOffset.numRetries lookups in a row failed") {
    val run = new Run(maxFailures = 2)
    run.next()
    run.runs(acquired = 0)
    run.admin.unreachable = true
    assert(run.next().contains(true), "failed lookup 1: the backlog is unknown")
    assert(run.outage.ongoing)
    run.runs(acquired = 0)
    run.backlogDue()
    assert(run.next().contains(true), "failed lookup 2")
    run.runs(acquired = 0)
    run.backlogDue()
    val e = intercept[KafkaShareRuntimeException](run.next())
    assert(e.condition == KafkaShareErrors.BrokerUnreachable)
  }

  test("a lookup the cluster answers after an outage ends it: an idle stream offers no round again") {
    val run = new Run(maxFailures = 1)
    run.next()
    run.runs(acquired = 0)
    run.admin.unreachable = true
    assert(run.next().contains(true))
    run.runs(acquired = 0)
    run.admin.unreachable = false
    run.backlogDue()
    assert(run.next().isEmpty)
    assert(!run.outage.ongoing)
    run.admin.unreachable = true
    run.backlogDue()
    assert(run.next().contains(true), "one failure is waited through again")
  }

  // The backlog the progress report shows, whose lookup the next planning reuses.

  test("the progress report marks a round that found nothing before its lookup, so a stale lag plans no round") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(5L))
    run.next()
    run.runs(acquired = 0)
    assert(run.next().contains(true))
    run.runs(acquired = 0)
    run.backlogDue()
    assert(run.reportedBacklog().contains(0L))
    assert(run.next().isEmpty, "the report's lookup serves the planning")
    assert(run.admin.callsOf("lags") == 2)
  }

  test("the progress report asks at once after a round that acquired nothing acknowledged records") {
    val run = new Run
    run.next()
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
    run.admin.lagsNow = Map(t0 -> Some(3L))
    assert(run.reportedBacklog().contains(0L), "not due: the last lookup serves")
    run.counters.accepted.add(10)
    assert(run.reportedBacklog().contains(3L))
  }

  test("while the cluster is unreachable the progress report leaves the backlog out, and counts no failed lookup") {
    val run = new Run(maxFailures = 0)
    run.next() // the first round: the backlog was not asked for yet
    run.admin.unreachable = true
    assert(run.reportedBacklog().isEmpty)
    assert(!run.outage.ongoing)
  }

  // Trigger.AvailableNow: rounds until the backlog at its start is taken.

  test("AvailableNow: rounds poll until what was taken reaches the backlog at start, then one closing round settles") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(100L))
    run.startAvailableNow()
    assert(run.next().contains(true))
    run.runs(acquired = 60)
    assert(run.next().contains(true))
    run.runs(acquired = 40)
    assert(run.next().contains(false), "100 taken: a round that only settles what the last one acquired")
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
    assert(run.round == 3)
  }

  test("AvailableNow: the drain counts what was taken from its start, not what the run took before") {
    val run = new Run
    run.next()
    run.runs(acquired = 500)
    run.admin.lagsNow = Map(t0 -> Some(100L))
    run.startAvailableNow()
    assert(run.next().contains(true))
    run.runs(acquired = 60)
    assert(run.next().contains(true))
    run.runs(acquired = 40)
    assert(run.next().contains(false))
  }

  test("AvailableNow: with nothing to drain at its start no round is offered") {
    val run = new Run
    run.startAvailableNow()
    assert(run.next().isEmpty)
  }

  test("AvailableNow: no closing round follows a last round that acquired nothing, once Kafka reports none left") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(100L))
    run.startAvailableNow()
    run.next()
    run.runs(acquired = 100)
    assert(run.next().contains(false))
    // The closing round released what it held (its batch's marks): the drain polls them again.
    run.runs(acquired = 0, released = 100)
    assert(run.next().contains(true))
    run.runs(acquired = 0)
    // Kafka now reports nothing left (another member took the released records): nothing to settle, no closing round.
    run.admin.lagsNow = Map(t0 -> Some(0L))
    assert(run.next().isEmpty)
  }

  test("AvailableNow: records released are drained again before the end") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(100L))
    run.startAvailableNow()
    run.next()
    run.runs(acquired = 100)
    assert(run.next().contains(false))
    run.admin.lagsNow = Map(t0 -> Some(30L))
    run.runs(acquired = 0, released = 30) // the closing round settled: 30 records RELEASEd
    assert(run.next().contains(true), "70 of 100 taken")
    run.runs(acquired = 30)
    assert(run.next().contains(false))
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
  }

  test("AvailableNow: records released by executors' janitors, outside any task, are drained again too") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(100L))
    run.startAvailableNow()
    run.next()
    run.runs(acquired = 100)
    assert(run.next().contains(false))
    run.admin.lagsNow = Map(t0 -> Some(20L))
    run.countedOutsideTasks = Map("recordsReleased" -> 20L)
    run.runs(acquired = 0)
    assert(run.next().contains(true))
    run.runs(acquired = 20)
    assert(run.next().contains(false))
  }

  test("AvailableNow: records a consumer on a lost executor held are given back and drained again, and count once") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(100L))
    run.startAvailableNow()
    run.next()
    run.runs(acquired = 100, reads = Seq(read(0, 1, "a", held = 50), read(1, 1, "b", held = 50)))
    assert(run.next().contains(false))
    // Executor b is lost with slot 1's consumer and the 50 records it held; its locks expire in Kafka.
    run.live = Set("a")
    run.admin.lagsNow = Map(t0 -> Some(50L))
    run.runs(acquired = 0, reads = Seq(read(0, 2, "a")))
    assert(run.next().contains(true), "50 of 100 taken")
    run.runs(acquired = 50, reads = Seq(read(0, 3, "a", held = 50)))
    assert(run.next().contains(false))
    run.runs(acquired = 0, reads = Seq(read(0, 4, "a")))
    assert(run.next().isEmpty, "the lost records were subtracted once")
  }

  test("AvailableNow: a backlog unknown at the start is drained until a round finds nothing and none is left") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> None)
    run.startAvailableNow()
    assert(run.next().contains(true))
    run.runs(acquired = 10)
    assert(run.next().contains(true))
    run.runs(acquired = 5)
    run.admin.lagsNow = Map(t0 -> Some(0L))
    assert(run.next().contains(true), "the last round acquired records: it may not have drained the group")
    run.runs(acquired = 0)
    assert(run.next().isEmpty)
  }

  test("AvailableNow: a drain ends on a stale lag only once its partition has been quiet for a lock duration") {
    val run = new Run(lockNanos = TimeUnit.MILLISECONDS.toNanos(150))
    run.admin.lagsNow = Map(t0 -> Some(5L)) // records another member holds, or a stale count
    run.startAvailableNow()
    assert(run.next().contains(true))
    assert(run.lastPlanned.get.roundStart.keySet == Set(t0))
    run.runs(acquired = 0)
    assert(run.next().contains(true), "quiet since a round that began just now: a dead member's locks may hold")
    run.clock.advance(TimeUnit.MILLISECONDS.toNanos(190))
    run.runs(acquired = 0)
    assert(run.next().isEmpty, "quiet for a lock duration over two rounds that found nothing")
  }

  test("AvailableNow: a slot moved to another executor holds the drain open while its old consumer may release") {
    val run = new Run
    run.admin.lagsNow = Map(t0 -> Some(100L))
    run.startAvailableNow()
    run.next()
    run.runs(acquired = 100, reads = Seq(read(0, 1, "a", held = 100)))
    assert(run.next().contains(false))
    // The closing round's task ran on b: the consumer left behind on a still holds the 100 records.
    run.runs(acquired = 0, reads = Seq(read(0, 2, "b")))
    assert(run.next().contains(true), "100 taken, but the consumer left behind may release them")
    run.runs(acquired = 0, reads = Seq(read(0, 3, "b")))
    assert(run.next().contains(true))
    // Once it may have released them (LeftBehindReleaseNanos), what was taken decides again.
    run.clock.advance(PlanningState.LeftBehindReleaseNanos)
    run.runs(acquired = 0, reads = Seq(read(0, 4, "b")))
    assert(run.next().isEmpty)
  }
}
