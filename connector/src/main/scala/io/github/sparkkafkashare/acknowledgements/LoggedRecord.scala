package io.github.sparkkafkashare.acknowledgements

/**
 * A record a round handed to Spark, with the delivery count it had then.
 *
 * @param topicId   the id of its topic when the round was planned: a topic deleted and made again under
 *                  the same name has another id, and its records reuse the old one's offsets
 * @param timestamp the record's timestamp, which a redelivery keeps: it tells the records of a topic
 *                  made again apart from the old ones while the driver has yet to see the new id
 */
private[sparkkafkashare] final case class LoggedRecord(
    coordinates: RecordCoordinates,
    deliveryCount: Int,
    topicId: Option[String] = None,
    timestamp: Option[Long] = None) {

  /**
   * Whether `polled` can be this record delivered again: the same coordinates, and no topic id or
   * timestamp that differs (one not known on either side does not tell them apart).
   */
  def sameAs(polled: LoggedRecord): Boolean = {
    def agree[T](a: Option[T], b: Option[T]) = a.isEmpty || b.isEmpty || a == b
    coordinates == polled.coordinates && agree(topicId, polled.topicId) && agree(timestamp, polled.timestamp)
  }
}
