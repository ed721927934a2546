package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

/**
 * The driver's monotonic time in nanoseconds, as `System.nanoTime` gives it, and a wait on it. The
 * planning rules about seconds (refresh intervals, a lock duration of quiet) take it as a parameter,
 * so that their tests move time by hand instead of sleeping.
 */
private[planning] trait NanoClock {
  def nanoTime(): Long

  def sleepNanos(nanos: Long): Unit
}

private[planning] object NanoClock {
  val System: NanoClock = new NanoClock {
    override def nanoTime(): Long = java.lang.System.nanoTime()

    override def sleepNanos(nanos: Long): Unit = TimeUnit.NANOSECONDS.sleep(nanos)
  }
}
