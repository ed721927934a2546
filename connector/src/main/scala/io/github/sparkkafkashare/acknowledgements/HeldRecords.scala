package io.github.sparkkafkashare.acknowledgements

import scala.jdk.CollectionConverters._

import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord}
import org.apache.kafka.common.TopicPartition

/**
 * The records one share consumer acquired in one round, held unacknowledged until Spark commits
 * the micro-batch that read them. Acknowledging earlier would lose the batch if the driver died
 * before the sink committed; acknowledging later than the lock lasts makes the broker deliver them
 * again unless the lock is renewed.
 *
 * @param round            the micro-batch round, or [[HeldRecords.NoRound]] for records a slot took
 *                         in between rounds
 * @param lockedSinceNanos no later than when the broker last (re)started these records' acquisition
 *                         locks: renewals are timed from it
 * @param records          the records whose locks this consumer holds: what settling acknowledges
 * @param hidden           records held and settled with the round but not handed to Spark, because
 *                         another slot's log already holds them for the same round
 * @param unlocked         records the round handed to Spark whose locks this consumer has since lost (a
 *                         renewal was refused): every evaluation of the round still returns them, since
 *                         the batch must read the same records each time, but nothing acknowledges them
 *                         here; the group delivers them again and the strategies that log rounds drop them
 * @param topicIds         the id of the topic each partition's records were delivered under: a topic made
 *                         again under its name reuses its offsets, so the records log tells records apart by it
 * @param accepted         records of earlier parts of the round, ACCEPTed once logged (`after-log`): every
 *                         evaluation of the round returns them first, and nothing is left to acknowledge
 * @param inParts          the round is logged in parts, each ACCEPTed once logged, before its rows leave the
 *                         task (`after-log`): records still held when it settles are of a part no attempt
 *                         logged (its task failed between the poll and the write), which no batch read
 */
private[sparkkafkashare] final case class HeldRecords(
    round: Long,
    records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]],
    lockedSinceNanos: Long,
    hidden: Set[RecordCoordinates] = Set.empty,
    unlocked: Seq[ConsumerRecord[Array[Byte], Array[Byte]]] = Nil,
    topicIds: Map[TopicPartition, String] = Map.empty,
    accepted: Seq[ConsumerRecord[Array[Byte], Array[Byte]]] = Nil,
    inParts: Boolean = false
) {

  /** What the round hands to Spark. */
  def visible: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] =
    if (hidden.isEmpty && unlocked.isEmpty && accepted.isEmpty) records
    else (accepted ++ records.asScala ++ unlocked).filterNot(r => hidden.contains(RecordCoordinates.of(r))).asJava

  /**
   * Once the batch that read them is committed: ACCEPT, or what user code marked. Otherwise
   * RELEASE, so the group redelivers them. Also RELEASE when the marks are of a later round
   * (explicit mode): no task of this slot ran in the round after this one, which carried this
   * round's marks, and an ACCEPT could undo a RELEASE user code asked for (a redelivery at worst).
   * A round `inParts` RELEASEs what it still holds whatever its batch did: no batch read it.
   */
  def settlement(committedThrough: Long, marks: AcknowledgementMarks, r: ConsumerRecord[_, _]): AcknowledgeType =
    if (!inParts && round <= committedThrough && marks.round <= round) marks.forRecord(round, r)
    else AcknowledgeType.RELEASE

  def size: Int = records.size()

  /** The id of the topic `r` was delivered under, if the poll that returned it told. */
  def topicIdOf(r: ConsumerRecord[_, _]): Option[String] = topicIds.get(new TopicPartition(r.topic(), r.partition()))
}
private[sparkkafkashare] object HeldRecords {
  val NoRound: Long = -1L
}
