package io.github.sparkkafkashare.planning

import java.util.concurrent.{CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.scalatest.concurrent.Eventually
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.SpanSugar._

/**
 * A real-time query's progress report never waits for Kafka: it shows the last lookup's backlog,
 * and starts the next lookup on the backlog's own thread when one is due and none is running.
 */
class BackgroundBacklogSuite extends AnyFunSuite with Eventually {

  private final class Lookups(answers: Iterator[() => Option[Long]]) {
    val started = new AtomicInteger()
    val released = new CountDownLatch(1)
    val clock = new ManualClock
    val backlog =
      new BackgroundBacklog("g", () => { started.incrementAndGet(); released.await(); answers.next()() }, clock)
  }

  test("a report answers at once while a lookup waits on Kafka, and starts no second lookup") {
    val run = new Lookups(Iterator(() => Some(7L)))
    try {
      (1 to 5).foreach(_ => assert(run.backlog.reported().isEmpty, "nothing known before the first lookup ends"))
      eventually(timeout(5.seconds))(assert(run.started.get() == 1))
      run.clock.advance(SubscribedTopics.RefreshNanos * 3)
      assert(run.backlog.reported().isEmpty)
      assert(run.started.get() == 1, "one lookup at a time")
      run.released.countDown()
      eventually(timeout(5.seconds))(assert(run.backlog.reported().contains(7L)))
    } finally run.backlog.close()
  }

  test("a lookup is due again only a refresh interval after the last one ended") {
    val run = new Lookups(Iterator(() => Some(3L), () => Some(0L)))
    run.released.countDown()
    try {
      run.backlog.reported()
      eventually(timeout(5.seconds))(assert(run.backlog.idle))
      assert(run.backlog.reported().contains(3L))
      (1 to 5).foreach(_ => run.backlog.reported())
      assert(run.started.get() == 1, "not due")
      run.clock.advance(SubscribedTopics.RefreshNanos)
      run.backlog.reported()
      eventually(timeout(5.seconds))(assert(run.backlog.idle))
      assert(run.backlog.reported().contains(0L))
      assert(run.started.get() == 2)
    } finally run.backlog.close()
  }

  test("an unreachable cluster, or a lookup that fails, reports no backlog until a lookup succeeds") {
    val unreachable =
      () =>
        throw KafkaShareErrors.brokerUnreachable("b:9092", 100L, "reading", new java.util.concurrent.TimeoutException())
    val run =
      new Lookups(Iterator(() => Some(4L), unreachable, () => throw new IllegalStateException("x"), () => Some(2L)))
    run.released.countDown()
    try {
      for ((expected, lookup) <- Seq(Some(4L), None, None, Some(2L)).zipWithIndex) {
        run.clock.advance(SubscribedTopics.RefreshNanos)
        run.backlog.reported()
        eventually(timeout(5.seconds))(assert(run.backlog.idle))
        assert(run.started.get() == lookup + 1)
        assert(run.backlog.reported() == expected)
      }
    } finally run.backlog.close()
  }

  test("close stops the lookup thread") {
    val run = new Lookups(Iterator.continually(() => Some(1L)))
    run.backlog.reported()
    eventually(timeout(5.seconds))(assert(run.started.get() == 1))
    run.backlog.close()
    val threads =
      Thread.getAllStackTraces.keySet().toArray(Array.empty[Thread]).filter(_.getName == "kafka-share-backlog[g]")
    threads.foreach(_.join(TimeUnit.SECONDS.toMillis(5)))
    assert(threads.forall(!_.isAlive), "the lookup thread ends when its wait is interrupted")
  }
}
