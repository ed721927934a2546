package io.github.sparkkafkashare.offsets

import org.apache.spark.sql.connector.read.streaming.{Offset, PartitionOffset}

/**
 * The position of a kafka-share query: a round counter, not a Kafka offset.
 *
 * A share group has no per-query position that Spark could replay from: the broker decides which
 * records each poll acquires. So each micro-batch is one "round" of polls by the query's share
 * consumers, and the offset log records which round a batch was. The records a round acquired are
 * held unacknowledged until Spark commits the batch whose end offset is that round.
 */
private[sparkkafkashare] final case class KafkaShareSourceOffset(round: Long) extends Offset {
  override def json(): String = s"""{"round":$round}"""
}

private[sparkkafkashare] object KafkaShareSourceOffset {
  private val Json = """\{\s*"round"\s*:\s*(\d+)\s*\}""".r

  val Initial: KafkaShareSourceOffset = KafkaShareSourceOffset(0L)

  def apply(offset: Offset): KafkaShareSourceOffset = offset match {
    case o: KafkaShareSourceOffset => o
    case other => fromJson(other.json())
  }

  def fromJson(json: String): KafkaShareSourceOffset = json.trim match {
    case Json(round) => KafkaShareSourceOffset(round.toLong)
    case _ => throw new IllegalStateException(
        s"Unreadable kafka-share offset '$json' in the checkpoint: it was not written by this source. " +
          "Start the query with a new checkpoint location, and with a new output location if its sink reads a " +
          "batch before it skips a batch id it already holds (batch ids start at 0 again)."
      )
  }
}

/**
 * Real-time mode: where a task of a round ended, which the driver merges into the batch's end offset.
 * Every task of a batch ends in its round: a task acknowledges its records itself, so the round is all
 * the position there is.
 */
private[sparkkafkashare] final case class KafkaShareRoundEnd(round: Long) extends PartitionOffset
