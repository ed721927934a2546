package io.github.sparkkafkashare.executor

import java.util.concurrent.TimeUnit

import org.apache.spark.TaskContext

/**
 * Who uses a slot's consumer: one task attempt at a time, reentrant, held from any of that attempt's
 * threads. A task's reader can run on another thread than the task's own (Spark 3.5 feeds a Python
 * UDF its input, and so reads the source, on a thread of its own), and the task's completion, on the
 * task's thread, gives the slot back; a lock owned by a thread would stay taken. Callers outside any
 * task (the janitor, the lock renewer, the JVM's exit) hold it by thread.
 */
private[executor] final class SlotLock(caller: () => Any = SlotLock.taskAttemptOrThread) {
  private var owner: Option[Any] = None // guarded by this
  private var holds = 0

  private def acquire(who: Any): Boolean =
    if (owner.forall(_ == who)) { owner = Some(who); holds += 1; true }
    else false

  def tryLock(): Boolean = synchronized(acquire(caller()))

  def tryLock(timeout: Long, unit: TimeUnit): Boolean = synchronized {
    val who = caller()
    val deadline = System.nanoTime() + unit.toNanos(timeout)
    var acquired = acquire(who)
    while (!acquired && deadline - System.nanoTime() > 0) {
      TimeUnit.NANOSECONDS.timedWait(this, deadline - System.nanoTime())
      acquired = acquire(who)
    }
    acquired
  }

  def lockInterruptibly(): Unit = synchronized {
    val who = caller()
    while (!acquire(who)) wait()
  }

  /** Waits through interrupts, and keeps the interrupt for the caller. */
  def lock(): Unit = {
    var interrupted = false
    var locked = false
    while (!locked) {
      try { lockInterruptibly(); locked = true }
      catch { case _: InterruptedException => interrupted = true }
    }
    if (interrupted) Thread.currentThread().interrupt()
  }

  def unlock(): Unit = synchronized {
    if (!owner.contains(caller())) throw new IllegalMonitorStateException("the slot is not held by this caller")
    holds -= 1
    if (holds == 0) {
      owner = None
      notifyAll()
    }
  }

  def isLocked: Boolean = synchronized(owner.isDefined)

  /** Whether the calling task (or, outside a task, thread) holds it. */
  def isHeldByCaller: Boolean = synchronized(owner.contains(caller()))
}

private[executor] object SlotLock {

  /** The calling task attempt, or, outside a task, the calling thread. */
  def taskAttemptOrThread(): Any =
    Option(TaskContext.get()).map(c => ("task", c.taskAttemptId())).getOrElse(Thread.currentThread())
}
