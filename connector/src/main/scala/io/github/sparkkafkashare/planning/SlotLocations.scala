package io.github.sparkkafkashare.planning

import org.apache.spark.util.AccumulatorV2

/**
 * Where each slot's consumer lives, as reported by the tasks that used it. The next round asks
 * for the same executor, because only that consumer can acknowledge what it acquired.
 */
private[sparkkafkashare] final class SlotLocations(private var locations: Map[Int, String])
  extends AccumulatorV2[(Int, String), Map[Int, String]] {

  def this() = this(Map.empty)

  override def isZero: Boolean = locations.isEmpty
  override def copy(): SlotLocations = new SlotLocations(locations)
  override def reset(): Unit = locations = Map.empty
  override def add(v: (Int, String)): Unit = locations += v
  override def merge(other: AccumulatorV2[(Int, String), Map[Int, String]]): Unit = locations ++= other.value
  override def value: Map[Int, String] = locations
}
