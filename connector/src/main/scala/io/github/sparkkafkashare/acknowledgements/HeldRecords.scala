package io.github.sparkkafkashare.acknowledgements

import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord}

/**
 * The records one share consumer acquired in one round, held unacknowledged until Spark commits
 * the micro-batch that read them. Acknowledging earlier would lose the batch if the driver died
 * before the sink committed; acknowledging later than the lock lasts makes the broker deliver them
 * again (duplicates, never loss).
 */
private[sparkkafkashare] final class HeldRecords(
    val round: Long,
    val records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]) {

  /** ACCEPT once the batch that read them is committed; otherwise RELEASE, so the group redelivers them. */
  def settlement(committedThrough: Long): AcknowledgeType =
    if (round <= committedThrough) AcknowledgeType.ACCEPT else AcknowledgeType.RELEASE

  def size: Int = records.size()
}
