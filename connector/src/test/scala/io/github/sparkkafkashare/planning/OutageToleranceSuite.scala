package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import org.apache.kafka.common.TopicPartition
import org.scalatest.funsuite.AnyFunSuite

/**
 * How many driver lookups in a row a query waits through while the Kafka cluster cannot be reached
 * (`fetchOffset.numRetries`), and what ends an outage, with a scripted [[GroupAdmin]]: no broker.
 */
class OutageToleranceSuite extends AnyFunSuite {
  private val tp = new TopicPartition("t", 0)

  private def setUp(maxFailures: Int): (FakeGroupAdmin, OutageTolerance) = {
    val admin = new FakeGroupAdmin
    admin.lagsNow = Map(tp -> Some(7L))
    (admin, new OutageTolerance(admin, maxFailures, "g"))
  }

  /** A lookup that asks the cluster: it fails while the fake is unreachable. */
  private def lookUp(admin: FakeGroupAdmin): Map[TopicPartition, Option[Long]] = admin.lags(Set(tp))

  test("a lookup the cluster answers returns its answer, and no outage is ongoing") {
    val (admin, outage) = setUp(maxFailures = 3)
    assert(outage.attempt("reading lags")(lookUp(admin)) == Some(Map(tp -> Some(7L))))
    assert(!outage.ongoing)
  }

  test("unreachable lookups are waited through up to maxFailures in a row, and the next one fails the query") {
    val (admin, outage) = setUp(maxFailures = 3)
    admin.unreachable = true
    (1 to 3).foreach { n =>
      assert(outage.attempt("reading lags")(lookUp(admin)).isEmpty, s"failure $n is waited through")
      assert(outage.ongoing)
    }
    val e = intercept[KafkaShareRuntimeException](outage.attempt("reading lags")(lookUp(admin)))
    assert(e.condition == KafkaShareErrors.BrokerUnreachable)
    assert(admin.callsOf("lags") == 4)
  }

  test("with maxFailures 0 the first unreachable lookup fails the query") {
    val (admin, outage) = setUp(maxFailures = 0)
    admin.unreachable = true
    intercept[KafkaShareRuntimeException](outage.attempt("reading lags")(lookUp(admin)))
  }

  test("a lookup the cluster answers ends the outage, so the count of failures in a row starts again") {
    val (admin, outage) = setUp(maxFailures = 2)
    admin.unreachable = true
    assert(outage.attempt("reading lags")(lookUp(admin)).isEmpty)
    assert(outage.attempt("reading lags")(lookUp(admin)).isEmpty)
    admin.unreachable = false
    assert(outage.attempt("reading lags")(lookUp(admin)).contains(Map(tp -> Some(7L))))
    assert(!outage.ongoing)
    // Two more failures are waited through again: the answered lookup reset the count.
    admin.unreachable = true
    assert(outage.attempt("reading lags")(lookUp(admin)).isEmpty)
    assert(outage.attempt("reading lags")(lookUp(admin)).isEmpty)
    intercept[KafkaShareRuntimeException](outage.attempt("reading lags")(lookUp(admin)))
  }

  test("a lookup that made no call returns its answer but does not end the outage") {
    val (admin, outage) = setUp(maxFailures = 2)
    admin.unreachable = true
    assert(outage.attempt("reading lags")(lookUp(admin)).isEmpty)
    admin.unreachable = false
    // Answered without asking the cluster (no partitions to look up, or nothing due for a refresh).
    assert(outage.attempt("reading lags")(admin.lags(Set.empty)).contains(Map.empty))
    assert(outage.attempt("listing topics")(42).contains(42))
    assert(outage.ongoing, "nothing said the cluster answers again")
    // So the failures still count in a row: one more is waited through, the next fails the query.
    admin.unreachable = true
    assert(outage.attempt("reading lags")(lookUp(admin)).isEmpty)
    intercept[KafkaShareRuntimeException](outage.attempt("reading lags")(lookUp(admin)))
  }

  test("other failures are not waited through: they fail the query at once and count nothing") {
    val (admin, outage) = setUp(maxFailures = 3)
    val refused =
      intercept[IllegalStateException](outage.attempt("reading lags")(throw new IllegalStateException("refused")))
    assert(refused.getMessage == "refused")
    assert(!outage.ongoing)
    val denied = KafkaShareErrors.notAuthorized("b:9092", "reading lags", new RuntimeException("denied"))
    assert(intercept[KafkaShareRuntimeException](outage.attempt("reading lags")(throw denied)) eq denied)
    assert(!outage.ongoing)
  }
}
