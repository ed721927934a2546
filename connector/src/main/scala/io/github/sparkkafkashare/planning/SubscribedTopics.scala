package io.github.sparkkafkashare.planning

import java.util.concurrent.TimeUnit

import io.github.sparkkafkashare.options.Subscription

/**
 * The topics a run reads and their ids, asked of Kafka at most every [[SubscribedTopics.RefreshNanos]]:
 * a pattern may match new topics, and a topic deleted and made again under its name gets another id,
 * which the records log keeps with each record.
 */
private[planning] final class SubscribedTopics(admin: ShareGroupAdmin, backlog: Backlog, subscription: Subscription) {
  private var current: Set[String] = Set.empty
  private var currentIds: Map[String, String] = Map.empty
  private var checked: Option[Long] = None

  def topics: Set[String] = current

  /** The ids of [[topics]], as the backlog last described them. */
  def ids: Map[String, String] = currentIds

  def refresh(): Unit = if (SubscribedTopics.due(checked)) {
    current = admin.subscribedTopics(subscription)
    currentIds = backlog.topicIds(current)
    checked = Some(System.nanoTime())
  }
}

private[planning] object SubscribedTopics {
  /** How often topics matching a pattern, and the backlog, are asked of Kafka. */
  val RefreshNanos: Long = TimeUnit.MILLISECONDS.toNanos(500)

  def due(lastChecked: Option[Long]): Boolean = lastChecked.forall(System.nanoTime() - _ > RefreshNanos)
}
