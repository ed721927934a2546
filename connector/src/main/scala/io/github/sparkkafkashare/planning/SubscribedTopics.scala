package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import io.github.sparkkafkashare.options.Subscription

/** The topics a run reads, asked of Kafka at most every [[SubscribedTopics.RefreshNanos]]: a pattern may match new topics. */
private[planning] final class SubscribedTopics(
    admin: GroupAdmin,
    subscription: Subscription,
    clock: NanoClock = NanoClock.System
) {
  private var current: Set[String] = Set.empty
  private var checked: Option[Long] = None

  def topics: Set[String] = current

  def refresh(): Unit = if (SubscribedTopics.due(checked, clock.nanoTime())) {
    current = admin.subscribedTopics(subscription)
    checked = Some(clock.nanoTime())
  }
}

private[planning] object SubscribedTopics {

  /** How often topics matching a pattern, and the backlog, are asked of Kafka. */
  val RefreshNanos: Long = TimeUnit.MILLISECONDS.toNanos(500)

  /** Whether a refresh last made at `lastChecked` is due again at `now`. */
  def due(lastChecked: Option[Long], now: Long): Boolean = lastChecked.forall(now - _ >= RefreshNanos)
}
