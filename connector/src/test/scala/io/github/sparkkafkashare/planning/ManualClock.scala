package io.github.sparkkafkashare.planning

/** A [[NanoClock]] that moves only when a test advances it, or when the code under test waits on it. */
final class ManualClock extends NanoClock {
  @volatile private var now = 0L

  /** How long the code under test has waited on this clock, in all. */
  var sleptNanos = 0L

  override def nanoTime(): Long = now

  override def sleepNanos(nanos: Long): Unit = {
    sleptNanos += nanos
    advance(nanos)
  }

  def advance(nanos: Long): Unit = now += nanos
}
