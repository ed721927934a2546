package io.github.sparkkafkashare.security

import scala.jdk.CollectionConverters._

import org.apache.kafka.clients.admin.AdminClientConfig
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.kafka.clients.producer.ProducerConfig
import org.apache.kafka.common.config.ConfigDef
import org.apache.spark.sql.SparkSession

/**
 * Spark prints a streaming DataFrame's options in its plan (`explain`, `queryExecution`), and hides
 * the value of an option whose name or value matches `spark.sql.redaction.options.regex` or
 * `spark.redaction.regex`. Some of Kafka's secret settings match neither: `kafka.ssl.keystore.key`
 * holds a PEM private key. So the source adds the names of every setting Kafka's clients type as a
 * password, with the `kafka.` prefix, to the session's `spark.sql.redaction.options.regex`, before
 * Spark builds the plan.
 */
private[sparkkafkashare] object SecretOptionRedaction {

  val Conf = "spark.sql.redaction.options.regex"

  /** Every setting of the clients the source makes that Kafka types as a password, as an option. */
  val SecretOptions: Seq[String] =
    Seq(ConsumerConfig.configDef(), ProducerConfig.configDef(), AdminClientConfig.configDef())
      .flatMap(_.configKeys().values().asScala)
      .collect { case key if key.`type` == ConfigDef.Type.PASSWORD => s"kafka.${key.name}" }
      .distinct
      .sorted

  /** Matches those options' names, in any case. */
  val Pattern: String = SecretOptions.map(_.replace(".", "\\.")).mkString("(?i:", "|", ")")

  /** Adds [[Pattern]] to `session`'s option redaction, keeping what it redacts already. */
  def extend(session: SparkSession): Unit = {
    val current = session.conf.getOption(Conf).getOrElse("")
    if (!current.contains(Pattern)) session.conf.set(Conf, if (current.isEmpty) Pattern else s"$current|$Pattern")
  }
}
