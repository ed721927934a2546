package io.github.sparkkafkashare.planning

import scala.collection.mutable

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.{KafkaShareSourceOptions, Subscription}
import org.apache.kafka.common.TopicPartition

/**
 * A [[GroupAdmin]] that tests script in place of a Kafka cluster: each call answers what the test
 * set last, is counted by name, and throws the source's unreachable error while [[unreachable]] is
 * set (or when the test scripts a call to fail). As [[ShareGroupAdmin]] does, a lookup of no
 * partitions makes no call: it is neither counted nor answered, and cannot fail.
 */
private[planning] final class FakeGroupAdmin extends GroupAdmin {

  /** Partitions per existing topic. */
  var partitionCounts: Map[String, Int] = Map.empty

  /** The topics `subscribedTopics` answers; by default those of [[partitionCounts]]. */
  var existingTopics: Option[Set[String]] = None

  /** Per partition, the lag Kafka reports (a partition not here: None, no share state). */
  var lagsNow: Map[TopicPartition, Option[Long]] = Map.empty

  /** Per partition, its log end offset (a partition not here: 0). */
  var endOffsetsNow: Map[TopicPartition, Long] = Map.empty

  /** Partitions assigned to this run's caught-up consumers. */
  var assigned: Set[TopicPartition] = Set.empty

  /** What `configureGroup` returns. */
  var configuredLimits: GroupLimits = FakeGroupAdmin.limits()

  /** What `groupLimits` answers; may throw. */
  var currentLimits: () => GroupLimits = () => configuredLimits

  /** Runs as `checkShareGroupsEnabled`; may throw. */
  var shareGroupsCheck: () => Unit = () => ()

  /** Every call throws KAFKA_SHARE_BROKER_UNREACHABLE while set. */
  var unreachable = false

  private var answered = 0L
  private val calls = mutable.Map.empty[String, Int].withDefaultValue(0)

  /** The arguments of each `configureGroup` call. */
  val configured = mutable.Buffer.empty[(KafkaShareSourceOptions, Seq[TopicPartition])]

  /** How many times `method` was called (answered or not). */
  def callsOf(method: String): Int = calls(method)

  override def callsAnswered: Long = answered

  private def call[T](method: String)(answer: => T): T = {
    calls(method) += 1
    if (unreachable) throw FakeGroupAdmin.unreachableError(method)
    val a = answer
    answered += 1
    a
  }

  override def checkShareGroupsEnabled(brokerDeadLetters: Boolean): Unit =
    call("checkShareGroupsEnabled")(shareGroupsCheck())

  override def configureGroup(options: KafkaShareSourceOptions, partitions: Seq[TopicPartition]): GroupLimits =
    call("configureGroup") {
      configured += ((options, partitions))
      configuredLimits
    }

  override def groupLimits(): GroupLimits = call("groupLimits")(currentLimits())

  override def subscribedTopics(subscription: Subscription): Set[String] =
    call("subscribedTopics")(existingTopics.getOrElse(partitionCounts.keySet))

  override def partitionsOf(topics: Set[String]): Seq[TopicPartition] =
    if (topics.isEmpty) Seq.empty
    else call("partitionsOf") {
      topics.toSeq.sorted.flatMap(t => (0 until partitionCounts.getOrElse(t, 0)).map(new TopicPartition(t, _)))
    }

  override def lags(partitions: Set[TopicPartition]): Map[TopicPartition, Option[Long]] =
    if (partitions.isEmpty) Map.empty
    else call("lags")(partitions.map(tp => tp -> lagsNow.getOrElse(tp, None)).toMap)

  override def endOffsets(partitions: Set[TopicPartition]): Map[TopicPartition, Long] =
    if (partitions.isEmpty) Map.empty
    else call("endOffsets")(partitions.map(tp => tp -> endOffsetsNow.getOrElse(tp, 0L)).toMap)

  override def assignedPartitions(clientIdPrefix: String): Set[TopicPartition] = call("assignedPartitions")(assigned)
}

private[planning] object FakeGroupAdmin {
  def limits(recordLocks: Int = 2000, lockMs: Long = 30000L, renew: Boolean = true): GroupLimits =
    GroupLimits(
      renewAllowed = renew,
      recordLocksPerPartition = recordLocks,
      lockDurationMs = lockMs,
      assignmentIntervalMs = 1000L
    )

  def unreachableError(action: String): KafkaShareRuntimeException =
    KafkaShareErrors.brokerUnreachable("b:9092", 100L, action, new java.util.concurrent.TimeoutException("no answer"))
}
