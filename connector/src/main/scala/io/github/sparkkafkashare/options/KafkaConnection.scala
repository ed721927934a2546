package io.github.sparkkafkashare.options

import io.github.sparkkafkashare.clients.ShadedKafkaNames

/**
 * How to reach the share group: what both the source and the group-state API need.
 *
 * @param kafkaParams the pass-through `kafka.*` settings with the prefix removed, minus the
 *                    settings this source owns. Values may be secrets: never log them.
 */
private[sparkkafkashare] final case class KafkaConnection(
    bootstrapServers: String,
    groupId: String,
    kafkaParams: Map[String, String]
) {

  /** Bound on every Admin call the driver makes, so an unreachable cluster fails instead of hanging. */
  def apiTimeoutMs: Long = KafkaShareSourceOptions.apiTimeoutMs(kafkaParams)

  /**
   * The pass-through settings for a Kafka client, those `known` to it, with Kafka's class names as
   * the shaded client has them; Kafka's system properties are mirrored first ([[ShadedKafkaNames]]).
   * Called right before a client is created, on the JVM that creates it.
   */
  def clientSettings(known: String => Boolean = _ => true): Map[String, String] = {
    ShadedKafkaNames.mirrorSystemProperties()
    ShadedKafkaNames.withClientClassNames(kafkaParams.filter { case (key, _) => known(key) })
  }
}
