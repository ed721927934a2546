package io.github.sparkkafkashare

import io.github.sparkkafkashare.errors.KafkaShareErrors

/**
 * Fails `load()` with a clear error when this jar runs on a Spark line or a Scala version it was not
 * built for, where it would otherwise fail deep in a query with a NoClassDefFoundError. Written with
 * Java's strings and arrays only: on another Scala version, Scala's collections are not the ones this
 * jar was compiled against, so neither is the error factory, and that error is a plain one.
 */
private[sparkkafkashare] object SupportedSpark {

  def check(): Unit = {
    val scalaFound = scala.util.Properties.versionNumberString
    val sparkFound = org.apache.spark.SPARK_VERSION
    val builtFor = "Spark " + BuiltFor.sparkLines + " with Scala " + BuiltFor.scalaBinaryVersion
    val found = "Spark " + sparkFound + " with Scala " + scalaFound
    if (line(scalaFound) != BuiltFor.scalaBinaryVersion) {
      // KafkaShareErrors.sparkUnsupported's condition and words: that object does not even load on another Scala.
      throw new UnsupportedOperationException("[KAFKA_SHARE_SPARK_UNSUPPORTED] This kafka-share jar is built " +
        "for " + builtFor + "; this application runs " + found + ". Use the kafka-share artifact built for your Spark " +
        "and Scala (the user guide's compatibility table names it).")
    }
    if (!(", " + BuiltFor.sparkLines + ", ").contains(", " + line(sparkFound) + ", ")) {
      throw KafkaShareErrors.sparkUnsupported(builtFor, found)
    }
  }

  /** "4.1" of "4.1.0", "2.13" of "2.13.16". */
  private def line(version: String): String = {
    val parts = version.split("\\.")
    if (parts.length < 2) version else parts(0) + "." + parts(1)
  }
}
