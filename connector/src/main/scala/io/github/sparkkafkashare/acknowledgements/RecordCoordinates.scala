package io.github.sparkkafkashare.acknowledgements

import org.apache.kafka.clients.consumer.ConsumerRecord

/** What identifies a record across redeliveries: the sink-side key of the `idempotent` strategy. */
private[sparkkafkashare] final case class RecordCoordinates(topic: String, partition: Int, offset: Long)
private[sparkkafkashare] object RecordCoordinates {
  def of(r: ConsumerRecord[_, _]): RecordCoordinates = RecordCoordinates(r.topic(), r.partition(), r.offset())
}
