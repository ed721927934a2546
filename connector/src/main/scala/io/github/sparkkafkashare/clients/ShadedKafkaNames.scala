package io.github.sparkkafkashare.clients

import org.apache.kafka.clients.consumer.ConsumerConfig

/**
 * The assembly shades kafka-clients (build.sbt), and the shader renames more than classes: every
 * string that names Kafka's package, so the shaded client looks for its classes and reads its system
 * properties under the shaded package. Users write Kafka's own names: the login module in
 * `kafka.sasl.jaas.config`, class settings such as `kafka.sasl.login.callback.handler.class`, and JVM
 * flags such as `-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls`. This maps them to the names the
 * client in this jar reads. Without shading (the connector's own tests) the two packages are the
 * same and nothing changes.
 */
private[sparkkafkashare] object ShadedKafkaNames {
  // Joined at run time: the shader would rewrite a literal "org.apache.kafka" into the shaded package.
  private val KafkaPackage = Seq("org", "apache", "kafka").mkString(".")
  private val ClientPackage = classOf[ConsumerConfig].getPackageName.stripSuffix(".clients.consumer")

  /**
   * The system properties kafka-clients reads, under Kafka's package (the names an operator sets).
   * integration-tests/test_security.py checks that the assembly's client reads no others.
   */
  val SystemProperties: Seq[String] = Seq(
    "allowed.login.modules",
    "disallowed.login.modules",
    "sasl.oauthbearer.allowed.urls",
    "sasl.oauthbearer.allowed.files",
    "automatic.config.providers"
  )

  /**
   * Kafka's class names in pass-through values (login modules, handlers, providers), as this jar has
   * them. A SASL callback handler of another package was compiled against Kafka's unshaded
   * interfaces: its [[UnshadedCallbackHandler]] bridge stands in for it.
   */
  def withClientClassNames(kafkaParams: Map[String, String]): Map[String, String] =
    if (ClientPackage == KafkaPackage) kafkaParams
    else kafkaParams.map { case (key, value) => key -> inClientPackage(value) } ++
      UnshadedCallbackHandler.Bridges.flatMap { case (setting, bridge) =>
        kafkaParams.get(setting).map(_.trim).filterNot(_.startsWith(s"$KafkaPackage.")).toSeq.flatMap { handler =>
          Seq(setting -> bridge.getName, UnshadedCallbackHandler.targetKey(setting) -> handler)
        }
      }

  /**
   * Copies each of [[SystemProperties]] an operator set under Kafka's name to the name the client
   * reads, with the class names in it mapped too (allowed login modules). Called before each client
   * is created, on the driver and the executors, so a property set after the JVM started counts.
   */
  def mirrorSystemProperties(): Unit = if (ClientPackage != KafkaPackage) {
    for (name <- SystemProperties; value <- Option(System.getProperty(s"$KafkaPackage.$name"))) {
      System.setProperty(s"$ClientPackage.$name", inClientPackage(value))
    }
  }

  private def inClientPackage(value: String): String = value.replace(s"$KafkaPackage.", s"$ClientPackage.")

  /**
   * Kafka's names for the shaded ones in a text from the client, such as an exception's message that
   * tells the user which system property to set: the user sets Kafka's name (see above).
   */
  def inKafkaNames(text: String): String = text.replace(s"$ClientPackage.", s"$KafkaPackage.")
}
