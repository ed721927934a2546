package io.github.sparkkafkashare.planning

import java.util.concurrent.{ExecutionException, TimeUnit}

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.options.Subscription
import org.apache.kafka.clients
  .admin.{ListShareGroupOffsetsSpec, OffsetSpec, ShareGroupDescription, SharePartitionOffsetInfo, TopicDescription}
import org.apache.kafka.common.{TopicCollection, TopicPartition, Uuid}
import org.apache.kafka.common.config.ConfigResource
import org.apache.kafka.common.errors.{GroupIdNotFoundException, UnknownTopicIdException}

/**
 * What the driver reads of the share group and its topics through [[AdminCalls]], changing nothing:
 * the group's configs, its per-partition state and lag, its members and their assignments, the
 * topics a subscription names, their partitions and ids, and log offsets.
 */
private[planning] final class ShareGroupLookups(calls: AdminCalls) {
  import calls.{admin, await, awaitIfExists}

  private val group = calls.connection.groupId

  /** The group's configs, with the broker's defaults for those the group does not set. */
  def groupConfigs(): Map[String, String] = {
    val resource = new ConfigResource(ConfigResource.Type.GROUP, group)
    val configs =
      await(s"reading the configs of share group '$group'", admin.describeConfigs(Seq(resource).asJava).all())
    Option(configs.get(resource)).toSeq.flatMap(_.entries().asScala).collect {
      case e if e.value() != null => e.name() -> e.value()
    }.toMap
  }

  /** The topics the subscription names that exist now (a pattern is matched against the cluster's topics). */
  def subscribedTopics(subscription: Subscription): Set[String] = subscription match {
    case Subscription.Topics(topics) => topics.toSet
    case p: Subscription.TopicPattern =>
      await("listing topics", admin.listTopics().names()).asScala.filter(t => p.pattern.matcher(t).matches()).toSet
  }

  /** The group's state per share-partition; empty for a group that has not started reading. */
  def partitionStates(): Map[TopicPartition, SharePartitionOffsetInfo] = {
    val spec = Map(group -> new ListShareGroupOffsetsSpec()).asJava
    try {
      await("reading share group offsets", admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(group))
        .asScala.collect { case (tp, info) if info != null => tp -> info }.toMap
    } catch {
      case e: ExecutionException if e.getCause.isInstanceOf[GroupIdNotFoundException] => Map.empty
    }
  }

  /**
   * Per partition: the records the group has yet to finish (available, or acquired and not yet
   * acknowledged), or None where Kafka cannot say (a share-partition it has not persisted).
   */
  def lags(partitions: Set[TopicPartition]): Map[TopicPartition, Option[Long]] = {
    if (partitions.isEmpty) return Map.empty
    val states = partitionStates()
    partitions.map(tp => tp -> states.get(tp).flatMap(lagOf)).toMap
  }

  /** The partitions of `topics`; a topic that does not exist (yet) has none (a share consumer waits for it). */
  def partitionsOf(topics: Set[String]): Seq[TopicPartition] =
    describeTopics(topics).flatMap(ShareGroupLookups.partitionsOf)

  /** Those of `topics` that exist, as Kafka describes them (partitions, id). */
  def describeTopics(topics: Set[String]): Seq[TopicDescription] =
    if (topics.isEmpty) Seq.empty
    else admin.describeTopics(topics.asJavaCollection).topicNameValues().asScala.toSeq.flatMap {
      case (topic, future) => awaitIfExists(s"describing topic '$topic'", future)
    }

  /**
   * Of `logged` topics (name and id), those that are gone: the cluster knows no topic of that id, and
   * the name names another topic now, or none. Asked by id, a broker that has yet to learn that a
   * topic was deleted still knows it, so a topic is never taken as gone early.
   */
  def topicsGone(logged: Set[(String, String)]): Set[(String, String)] = {
    if (logged.isEmpty) return Set.empty
    val byId =
      admin.describeTopics(TopicCollection.ofTopicIds(logged.map(t => Uuid.fromString(t._2)).asJava)).topicIdValues()
    // Not await: Kafka takes an unknown id for metadata not yet propagated (retriable), not for an outage.
    val unknown = logged.filter { case (_, id) =>
      try { byId.get(Uuid.fromString(id)).get(calls.connection.apiTimeoutMs, TimeUnit.MILLISECONDS); false }
      catch {
        case e: ExecutionException if e.getCause.isInstanceOf[UnknownTopicIdException] => true
      }
    }
    val now = describeTopics(unknown.map(_._1)).map(d => d.name() -> d.topicId().toString).toMap
    unknown.filterNot { case (topic, id) => now.get(topic).contains(id) }
  }

  /** The log end offset of each partition. */
  def endOffsets(partitions: Set[TopicPartition]): Map[TopicPartition, Long] =
    offsets(partitions, OffsetSpec.latest())

  /** The offset `spec` gives for each partition that exists. */
  def offsets(partitions: Set[TopicPartition], spec: OffsetSpec): Map[TopicPartition, Long] = {
    if (partitions.isEmpty) return Map.empty
    val listed = admin.listOffsets(partitions.map(tp => tp -> spec).toMap.asJava)
    partitions.flatMap(tp => awaitIfExists(s"listing offsets of $tp", listed.partitionResult(tp)).map(tp -> _.offset())).toMap
  }

  /**
   * Partitions assigned to members whose client id starts with `clientIdPrefix`, counting only
   * members that have caught up with the group's target assignment (their member epoch has reached
   * it), so they are fetching those partitions rather than about to.
   */
  def assignedPartitions(clientIdPrefix: String): Set[TopicPartition] = {
    describeGroup().toSeq.flatMap { described =>
      described.members().asScala
        .filter(m => m.clientId().startsWith(clientIdPrefix) && m.memberEpoch() >= described.targetAssignmentEpoch())
        .flatMap(_.assignment().topicPartitions().asScala)
    }.toSet
  }

  /** The group's state, members and per-partition progress, for monitoring; None if the group does not exist. */
  def describe(): Option[ShareGroupState] = {
    describeGroup().map { d =>
      val members = d.members().asScala.toSeq.map { m =>
        ShareGroupMember(
          m.consumerId(),
          m.clientId(),
          m.host(),
          m.assignment().topicPartitions().asScala.toSeq.map(tp => (tp.topic(), tp.partition())).sorted
        )
      }
      val partitions = partitionStates().toSeq.map { case (tp, info) =>
        SharePartitionState(tp.topic(), tp.partition(), info.startOffset(), lagOf(info))
      }.sortBy(p => (p.topic, p.partition))
      ShareGroupState(group, d.groupState().toString, members, partitions)
    }
  }

  /** The group as Kafka describes it; None if it does not exist. */
  private def describeGroup(): Option[ShareGroupDescription] =
    try {
      Some(await(
        s"describing share group '$group'",
        admin.describeShareGroups(Seq(group).asJava).describedGroups().get(group)
      ))
    } catch {
      case e: ExecutionException if e.getCause.isInstanceOf[GroupIdNotFoundException] => None
    }

  private def lagOf(info: SharePartitionOffsetInfo): Option[Long] = Option(info.lag().orElse(null)).map(_.longValue())
}

private[planning] object ShareGroupLookups {

  /** The partitions of a described topic. */
  def partitionsOf(topic: TopicDescription): Seq[TopicPartition] =
    topic.partitions().asScala.toSeq.map(p => new TopicPartition(topic.name(), p.partition()))
}
