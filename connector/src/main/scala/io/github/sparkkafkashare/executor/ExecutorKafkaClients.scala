package io.github.sparkkafkashare.executor

import io.github.sparkkafkashare.clients.ShadedKafkaNames
import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.kafka.common.KafkaException
import org.apache.spark.SparkEnv

/** Creates the Kafka clients of an executor (share consumers, the replay consumer) from settings the driver mapped. */
private[executor] object ExecutorKafkaClients {

  /**
   * `newClient`, after this JVM's Kafka system properties are mirrored (the driver mapped the
   * settings' class names, not this JVM's properties, and a client may be the JVM's first). A client
   * Kafka cannot create fails naming `client` and this executor: the driver's Admin client was
   * created with the same settings, so what differs is this JVM (a file the settings name that only
   * the driver has, a system property set on the driver only).
   */
  def create[C](client: String, groupId: String)(newClient: => C): C =
    try {
      ShadedKafkaNames.mirrorSystemProperties()
      newClient
    } catch {
      case e: KafkaException => throw KafkaShareErrors.clientNotCreated(
          s"$client on executor ${Option(SparkEnv.get).map(_.executorId).getOrElse("?")}",
          groupId,
          e
        )
    }
}
