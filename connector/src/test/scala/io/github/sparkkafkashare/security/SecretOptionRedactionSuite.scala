package io.github.sparkkafkashare.security

import org.scalatest.funsuite.AnyFunSuite

/** The options whose values the source has Spark hide in plans. */
class SecretOptionRedactionSuite extends AnyFunSuite {
  private val pattern = SecretOptionRedaction.Pattern.r

  test("Kafka's password settings are the options hidden, the PEM private key among them") {
    val secrets = Seq(
      "kafka.ssl.keystore.key",
      "kafka.sasl.jaas.config",
      "kafka.ssl.key.password",
      "kafka.ssl.keystore.password",
      "kafka.ssl.truststore.password"
    )
    assert(secrets.toSet.subsetOf(SecretOptionRedaction.SecretOptions.toSet))
    assert(secrets.forall(option => pattern.findFirstIn(option.toUpperCase).isDefined))
  }

  test("other options, and the settings that name a file, stay visible") {
    val visible = Seq(
      "kafka.bootstrap.servers",
      "kafka.ssl.keystore.location",
      "kafka.sasl.mechanism",
      "subscribe"
    )
    assert(visible.forall(option => pattern.findFirstIn(option).isEmpty))
  }
}
