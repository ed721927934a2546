package io.github.sparkkafkashare.executor

import org.scalatest.funsuite.AnyFunSuite

class SlotLocationsSuite extends AnyFunSuite {

  /** The driver's accumulator after tasks reported `reads`, each from a task copy of its own, merged in order. */
  private def merged(reads: SlotRead*): SlotLocations = {
    val driver = new SlotLocations()
    reads.foreach { read =>
      val task = driver.copyAndReset()
      task.add(read)
      driver.merge(task)
    }
    driver
  }

  test("a slot's home is the executor that read its latest round") {
    val locations = merged(SlotRead(0, 1, "a"), SlotRead(1, 1, "b"), SlotRead(0, 2, "b"), SlotRead(0, 2, "b"))
    assert(locations.homes == Map(0 -> "b", 1 -> "b"))
    // A report of an older round that arrives late does not move the slot back.
    locations.merge(merged(SlotRead(0, 1, "a")))
    assert(locations.homes(0) == "b")
  }

  test("a round read on two executors has no home, until the slot's next round reads it on one") {
    val locations = merged(SlotRead(0, 3, "a"), SlotRead(1, 3, "a"), SlotRead(0, 3, "b"))
    assert(locations.homes == Map(0 -> SlotLocations.NoHome, 1 -> "a"))
    locations.merge(merged(SlotRead(0, 4, "b")))
    assert(locations.homes(0) == "b")
  }

  test("a round read on two executors keeps what each one's consumer held, the most it reported") {
    val locations = merged(SlotRead(0, 3, "a"), SlotRead(0, 3, "a", held = 40), SlotRead(0, 3, "b", held = 25))
    assert(locations.value(0) == SlotReads(3, Map("a" -> 40, "b" -> 25)))
    locations.merge(merged(SlotRead(0, 3, "b", held = 0)))
    assert(locations.value(0).held == Map("a" -> 40, "b" -> 25), "a report at a task's start lowers nothing")
  }
}
