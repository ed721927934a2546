package io.github.sparkkafkashare.errors

class KafkaShareUnsupportedOperationException private[sparkkafkashare] (
    val condition: String,
    val parameters: Map[String, String],
    message: String
) extends UnsupportedOperationException(message) with KafkaShareThrowable
