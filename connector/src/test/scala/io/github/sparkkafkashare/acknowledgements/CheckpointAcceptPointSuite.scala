package io.github.sparkkafkashare.acknowledgements

import java.nio.file.{Files, Path}

import io.github.sparkkafkashare.errors.KafkaShareRuntimeException
import io.github.sparkkafkashare.options.AcceptPoint.{AfterCommit, AfterLog}
import io.github.sparkkafkashare.options.{AcceptPoint, ExactlyOnceStrategy}
import io.github.sparkkafkashare.options.ExactlyOnceStrategy.{CheckpointDedup, TwoPhaseCommit}
import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

/** Which runs a checkpoint's accept point lets through, and when it changes (no broker). */
class CheckpointAcceptPointSuite extends AnyFunSuite {

  private def start(dir: Path, point: AcceptPoint, strategy: ExactlyOnceStrategy) =
    new CheckpointAcceptPoint(dir.toString, new Configuration(), point, strategy)

  private def recorded(dir: Path) = Files.readString(dir.resolve(CheckpointAcceptPoint.FileName))

  test("a new checkpoint records the run's accept point before any batch runs") {
    val dir = Files.createTempDirectory("source")
    assert(start(dir, AfterLog, TwoPhaseCommit).reRunsAfterLog)
    assert(recorded(dir) == """{"acknowledge":"after-log"}""")
  }

  test("an after-log checkpoint refuses every strategy that does not re-run a batch from the log") {
    val dir = Files.createTempDirectory("source")
    start(dir, AfterLog, TwoPhaseCommit)
    for (strategy <- ExactlyOnceStrategy.all.filterNot(_.replaysLoggedRecords); point <- AcceptPoint.all) {
      val refused = intercept[KafkaShareRuntimeException](start(dir, point, strategy))
      assert(refused.getCondition == "KAFKA_SHARE_CHECKPOINT_NEEDS_REPLAY", refused.getMessage)
      assert(refused.getMessage.contains(s"Strategy '${strategy.name}' does not re-run it"), refused.getMessage)
    }
    assert(recorded(dir) == """{"acknowledge":"after-log"}""", "a refused run changes nothing")
  }

  test("a run under two-phase-commit re-runs the after-log batch, and its first commit frees the checkpoint") {
    val dir = Files.createTempDirectory("source")
    start(dir, AfterLog, TwoPhaseCommit)
    val restarted = start(dir, AfterCommit, TwoPhaseCommit)
    assert(restarted.reRunsAfterLog, "the batch to re-run ran under after-log: it is sealed before it is read")
    intercept[KafkaShareRuntimeException](start(dir, AfterCommit, CheckpointDedup))
    restarted.committed()
    assert(!restarted.reRunsAfterLog && recorded(dir) == """{"acknowledge":"after-commit"}""")
    assert(!start(dir, AfterCommit, CheckpointDedup).reRunsAfterLog)
  }
}
