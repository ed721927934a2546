package io.github.sparkkafkashare.acknowledgements

import io.github.sparkkafkashare.runs.RoundMarks
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord}

/**
 * The acknowledgements user code chose, in explicit mode, for records of one committed round.
 * Records without a mark are ACCEPTed.
 */
private[sparkkafkashare] final case class AcknowledgementMarks(
    round: Long,
    marks: Map[RecordCoordinates, AcknowledgeType]
) {
  def forRecord(round: Long, r: ConsumerRecord[_, _]): AcknowledgeType =
    if (round == this.round) marks.getOrElse(RecordCoordinates.of(r), AcknowledgeType.ACCEPT)
    else AcknowledgeType.ACCEPT

  /** In the plain types the driver's registry of query runs sends executors. */
  def plain: RoundMarks = RoundMarks(round, marks.map { case (c, ack) => (c.topic, c.partition, c.offset) -> ack.name })
}
private[sparkkafkashare] object AcknowledgementMarks {
  val None: AcknowledgementMarks = AcknowledgementMarks(-1L, Map.empty)

  def of(plain: RoundMarks): AcknowledgementMarks = AcknowledgementMarks(
    plain.round,
    plain.marks.map {
      case ((topic, partition, offset), ack) =>
        RecordCoordinates(topic, partition, offset) -> AcknowledgeType.valueOf(ack)
    }
  )
}
