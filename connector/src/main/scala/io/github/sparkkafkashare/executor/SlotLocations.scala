package io.github.sparkkafkashare.executor

import org.apache.spark.util.AccumulatorV2

/**
 * A task of `round` used the consumer of `slot` on `executor`, which then held `held` records of the
 * round, unsettled until the slot's next task (0 as the task begins).
 */
private[sparkkafkashare] final case class SlotRead(slot: Int, round: Long, executor: String, held: Int = 0)

/**
 * The executors whose consumers read a slot's latest round, each with the most records it held of the
 * round: each executor's consumer acquired records of its own.
 */
private[sparkkafkashare] final case class SlotReads(round: Long, held: Map[String, Int]) {
  def executors: Set[String] = held.keySet
}

/**
 * Where each slot's consumer lives, as reported by the tasks that used it. The next round asks
 * for the same executor, because only that consumer can acknowledge what it acquired.
 *
 * A round that consumers on two executors read has no home ([[SlotLocations.NoHome]]): Spark
 * evaluated the batch again where the first consumer was not (a second foreachBatch action, or a
 * stage re-run after an executor died), and without a records log the second consumer polled
 * records of its own. The sink may hold some of either, so neither may be ACCEPTed: every consumer
 * of the slot then RELEASEs what it holds, as one left behind does (a redelivery, never a loss).
 */
private[sparkkafkashare] final class SlotLocations(private var reads: Map[Int, SlotReads])
  extends AccumulatorV2[SlotRead, Map[Int, SlotReads]] {

  def this() = this(Map.empty)

  override def isZero: Boolean = reads.isEmpty
  override def copy(): SlotLocations = new SlotLocations(reads)
  override def reset(): Unit = reads = Map.empty
  override def add(v: SlotRead): Unit =
    reads = SlotLocations.merged(reads, v.slot, SlotReads(v.round, Map(v.executor -> v.held)))
  override def merge(other: AccumulatorV2[SlotRead, Map[Int, SlotReads]]): Unit =
    other.value.foreach { case (slot, read) => reads = SlotLocations.merged(reads, slot, read) }
  override def value: Map[Int, SlotReads] = reads

  /** Per slot, the executor whose consumer read its latest round, or [[SlotLocations.NoHome]]. */
  def homes: Map[Int, String] = reads.map { case (slot, read) =>
    slot -> (if (read.executors.size == 1) read.executors.head else SlotLocations.NoHome)
  }
}

private[sparkkafkashare] object SlotLocations {

  /** The home of a slot whose latest round consumers on several executors read: no executor's. */
  val NoHome = "(read on several executors)"

  private def merged(reads: Map[Int, SlotReads], slot: Int, read: SlotReads): Map[Int, SlotReads] =
    reads.get(slot) match {
      case Some(known) if known.round > read.round => reads
      case Some(known) if known.round == read.round =>
        val held = read.held.foldLeft(known.held) { case (acc, (executor, n)) =>
          acc.updated(executor, math.max(n, acc.getOrElse(executor, 0)))
        }
        reads + (slot -> SlotReads(read.round, held))
      case _ => reads + (slot -> read)
    }
}
