package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.SlotLocations
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
 * fact, often after the slot's next task already ran elsewhere. Each executor's part of a read counts
 * once: a round read on two executors (a batch evaluated again elsewhere) counts what each held, as
 * each is found gone.
 *
 * It can count more than comes back, never less: a settlement whose task then failed (its report is
 * dropped with the task) leaves the read counted, though it ACCEPTed what it held. A drain that counts
 * more ends once the group's backlog stays empty for a lock duration instead.
 *
 * @param liveExecutors the task locations of the live executors, the driver's among them (in local mode the only one)
 */
private[planning] final class LostConsumers(slotLocations: SlotLocations, liveExecutors: () => Set[String])
  extends Logging {

  /** Records held by a consumer that has not been seen to settle them, by slot, round and executor. */
  private var unsettled = Map.empty[(Int, Long, String), Int]

  /** Records held by a consumer found gone, by slot, round and executor: each counts once. */
  private var givenBack = Map.empty[(Int, Long, String), Int]

  /** Records held by consumers on executors that are gone, as of now. */
  def heldRecords(): Long = {
    val reads = slotLocations.value
    unsettled = unsettled.filterNot { case ((slot, round, executor), _) =>
      reads.get(slot).exists(latest => latest.round > round && latest.executors.contains(executor))
    } ++ (for {
      (slot, read) <- reads
      (executor, held) <- read.held if held > 0 && !givenBack.contains((slot, read.round, executor))
    } yield (slot, read.round, executor) -> held)
    if (unsettled.nonEmpty) {
      val live = liveExecutors()
      unsettled.foreach { case (key @ (slot, round, executor), held) =>
        if (!live.contains(executor)) {
          unsettled -= key
          givenBack += key -> held
          logInfo(
            s"Slot $slot's consumer held $held records of round $round on $executor, which is gone: Kafka " +
              "delivers them again once their locks expire."
          )
        }
      }
    }
    givenBack.values.map(_.toLong).sum
  }
}
