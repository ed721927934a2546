package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.GroupLimits
import org.scalatest.funsuite.AnyFunSuite

/** The limits a query takes from its group's configs, as Kafka's Admin API describes them. */
class ShareGroupConfigsSuite extends AnyFunSuite {
  import ShareGroupConfigs._

  test("a config the description lacks takes Kafka's default") {
    assert(limitsIn(Map.empty) == GroupLimits(
      renewAllowed = true,
      recordLocksPerPartition = DefaultRecordLocksPerPartition,
      lockDurationMs = DefaultLockDurationMs,
      assignmentIntervalMs = DefaultAssignmentIntervalMs
    ))
  }

  test("the group's values, as Kafka describes them, are the limits") {
    val configs = Map(
      RenewAllowedConfig -> "false",
      RecordLocksConfig -> "4000",
      LockDurationConfig -> "15000",
      AssignmentIntervalConfig -> "0",
      "share.delivery.count.limit" -> "5"
    )
    assert(limitsIn(configs) == GroupLimits(
      renewAllowed = false,
      recordLocksPerPartition = 4000,
      lockDurationMs = 15000L,
      assignmentIntervalMs = 0L
    ))
  }

  test("the release a metadata.version level below 4.2's belongs to, for the error that refuses it") {
    assert(Seq(27, 26, 25, 22, 21).map(releaseOf) == Seq("4.1", "4.1", "4.0", "4.0", "3.x"))
  }
}
