package io.github.sparkkafkashare.errors

/** A bad option or setting; surfaces in PySpark as `pyspark.errors.IllegalArgumentException`. */
class KafkaShareIllegalArgumentException private[sparkkafkashare] (
    val condition: String,
    val parameters: Map[String, String],
    message: String
) extends IllegalArgumentException(message) with KafkaShareThrowable
