package io.github.sparkkafkashare.acknowledgements

/**
 * A record a round handed to Spark, with the delivery count it had then.
 *
 * @param topicId the id of the topic it was delivered under: a topic deleted and made again under the
 *                same name has another id, and its records reuse the old one's offsets
 */
private[sparkkafkashare] final case class LoggedRecord(
    coordinates: RecordCoordinates,
    deliveryCount: Int,
    topicId: Option[String] = None
) {

  /**
   * Whether `polled` can be this record delivered again: the same coordinates, and no topic id that
   * differs (one not known on either side, as in the released records' file, does not tell them apart).
   */
  def sameAs(polled: LoggedRecord): Boolean =
    coordinates == polled.coordinates && (topicId.isEmpty || polled.topicId.isEmpty || topicId == polled.topicId)
}
