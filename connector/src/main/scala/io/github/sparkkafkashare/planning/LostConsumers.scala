package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.{SlotLocations, SlotReads}
import org.apache.spark.internal.Logging

/**
 * The records that consumers on executors that are gone held, unsettled: a lost worker takes its
 * executor with it, and the share consumers in it with the records they acquired for their slot's
 * last round there (settled only by the slot's next task on that executor). Kafka delivers those
 * records again once their locks expire, so a drain counts them as given back ([[RoundPolicy]]) and
 * reads them again before it ends.
 *
 * A read stays in question until the slot's consumer on its executor settles it (the slot reads a
 * later round there) or that executor is found gone: Spark notices a lost executor seconds after the
 * fact, often after the slot's next task already ran elsewhere. Each read counts once.
 *
 * @param liveExecutors the task locations of the live executors, the driver's among them (in local mode the only one)
 */
private[planning] final class LostConsumers(slotLocations: SlotLocations, liveExecutors: () => Set[String])
  extends Logging {

  /** Reads whose consumer held records and has not been seen to settle them, by slot and round. */
  private var unsettled = Map.empty[(Int, Long), SlotReads]
  private var counted = Set.empty[(Int, Long)]
  private var givenBack = 0L

  /** Records held by consumers on executors that are gone, as of now. */
  def heldRecords(): Long = {
    val reads = slotLocations.value
    unsettled = unsettled.filterNot { case ((slot, round), read) =>
      reads.get(slot).exists(latest => latest.round > round && latest.executors.subsetOf(read.executors))
    } ++ reads.collect {
      case (slot, read) if read.held > 0 && !counted.contains(slot -> read.round) => (slot, read.round) -> read
    }
    if (unsettled.nonEmpty) {
      val live = liveExecutors()
      unsettled.foreach { case (key @ (slot, round), read) =>
        if (!read.executors.exists(live.contains)) {
          unsettled -= key
          counted += key
          givenBack += read.held
          logInfo(
            s"Slot $slot's consumer held ${read.held} records of round $round on ${read.executors.mkString(", ")}, " +
              "which is gone: Kafka delivers them again once their locks expire."
          )
        }
      }
    }
    givenBack
  }
}
