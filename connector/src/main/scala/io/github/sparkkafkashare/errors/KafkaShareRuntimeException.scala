package io.github.sparkkafkashare.errors

/** A failure talking to Kafka that the user can act on (unreachable cluster, refused group config). */
class KafkaShareRuntimeException private[sparkkafkashare] (
    val condition: String,
    val parameters: Map[String, String],
    message: String,
    cause: Throwable
) extends RuntimeException(message, cause) with KafkaShareThrowable
