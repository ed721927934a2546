package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.{SlotLocations, SlotRead}
import org.scalatest.funsuite.AnyFunSuite

/** What a drain counts as given back when executors are lost, from the slots' reads as the tasks report them. */
class LostConsumersSuite extends AnyFunSuite {
  private var live = Set("a", "b")

  private def reported(locations: SlotLocations, reads: SlotRead*): Unit = reads.foreach { read =>
    val task = locations.copyAndReset()
    task.add(read)
    locations.merge(task)
  }

  test("what consumers on a lost executor held counts once, whether their read is the slot's latest or replaced") {
    live = Set("a", "b")
    val locations = new SlotLocations()
    val lost = new LostConsumers(locations, () => live)
    reported(locations, SlotRead(0, 1, "a", held = 50), SlotRead(1, 1, "b", held = 30))
    assert(lost.heldRecords() == 0)
    live = Set("a")
    assert(lost.heldRecords() == 30)
    assert(lost.heldRecords() == 30, "counted again")
    // Slot 1's next task runs on a: the lost consumer's round is not settled by it, and counts no more.
    reported(locations, SlotRead(0, 2, "a", held = 20), SlotRead(1, 2, "a", held = 40))
    assert(lost.heldRecords() == 30)
  }

  test("a round read on two executors counts what each one held, as each is found gone") {
    live = Set("a", "b")
    val locations = new SlotLocations()
    val lost = new LostConsumers(locations, () => live)
    // Spark evaluated slot 4's batch again on b (foreachBatch reading it twice): b's consumer polled its own.
    reported(locations, SlotRead(4, 7, "a", held = 30), SlotRead(4, 7, "b", held = 20))
    live = Set("b")
    assert(lost.heldRecords() == 30, "a is gone, with what its consumer held, though b lives")
    live = Set.empty
    assert(lost.heldRecords() == 50)
  }

  test("a read replaced elsewhere before its executor was found gone counts once the executor is gone") {
    live = Set("a", "b")
    val locations = new SlotLocations()
    val lost = new LostConsumers(locations, () => live)
    reported(locations, SlotRead(2, 5, "b", held = 12), SlotRead(3, 5, "a", held = 9))
    assert(lost.heldRecords() == 0)
    // b is lost, and slot 2's next task runs on a before Spark takes b for gone.
    reported(locations, SlotRead(2, 6, "a", held = 0), SlotRead(3, 6, "a", held = 0))
    assert(lost.heldRecords() == 0, "b is still taken as live")
    live = Set("a")
    assert(lost.heldRecords() == 12, "found gone after its read was replaced")
    // Slot 3's round 5 was settled by its next task on the same executor: it never counts.
    live = Set.empty
    assert(lost.heldRecords() == 12)
  }
}
