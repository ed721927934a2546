package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import io.github.sparkkafkashare.options.Subscription

/** The topics a run reads, asked of Kafka at most every [[SubscribedTopics.RefreshNanos]]: a pattern may match new topics. */
private[planning] final class SubscribedTopics(admin: GroupAdmin, subscription: Subscription) {
  private var current: Set[String] = Set.empty
  private var checked: Option[Long] = None

  def topics: Set[String] = current

  def refresh(): Unit = if (SubscribedTopics.due(checked)) {
    current = admin.subscribedTopics(subscription)
    checked = Some(System.nanoTime())
  }
}

private[planning] object SubscribedTopics {

  /** How often topics matching a pattern, and the backlog, are asked of Kafka. */
  val RefreshNanos: Long = TimeUnit.MILLISECONDS.toNanos(500)

  def due(lastChecked: Option[Long]): Boolean = lastChecked.forall(System.nanoTime() - _ > RefreshNanos)
}
