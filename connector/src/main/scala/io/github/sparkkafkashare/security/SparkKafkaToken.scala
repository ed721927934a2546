package io.github.sparkkafkashare.security

import java.nio.charset.StandardCharsets.UTF_8

import scala.util.control.NonFatal

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.hadoop.io.Text
import org.apache.hadoop.security.{Credentials, UserGroupInformation}
import org.apache.kafka.clients.CommonClientConfigs
import org.apache.kafka.common.config.SaslConfigs
import org.apache.kafka.common.security.JaasContext
import org.apache.kafka.common.security.scram.ScramLoginModule
import org.apache.spark.{SparkConf, SparkEnv}
import org.apache.spark.internal.Logging

/**
 * A Kafka delegation token that Spark obtained on the driver (`spark.kafka.clusters.<id>.*`) and
 * shipped to every JVM of the application in the Hadoop credentials. `hmac` is the token's password,
 * in base64 as Kafka's SCRAM login takes it: [[toString]] leaves it out, no message names it, and no
 * client setting holds it ([[SparkKafkaTokenCallbackHandler]] hands it to the login).
 */
private[sparkkafkashare] final case class SparkKafkaToken(
    clusterId: String,
    tokenId: String,
    hmac: String,
    mechanism: String,
    securityProtocol: String
) {

  override def toString: String =
    s"SparkKafkaToken(cluster $clusterId, token $tokenId, $mechanism over $securityProtocol, hmac redacted)"
}

/**
 * Which of Spark's Kafka tokens a client uses, and the settings that log in with it, as Spark's
 * `kafka` source does: the token of the one cluster whose `target.bootstrap.servers.regex` matches a
 * bootstrap server. Read from this JVM's credentials at each login, so a client logs in with the
 * newest token Spark obtained (Spark re-obtains Kafka tokens rather than renewing them).
 *
 * Only through APIs that Spark 3.5 to 4.3 all have (`SparkConf`, Hadoop's `UserGroupInformation`):
 * Spark's own token classes are `private[spark]` on 3.5.
 */
private[sparkkafkashare] object SparkKafkaToken extends Logging {

  val ClustersPrefix = "spark.kafka.clusters."
  val EnabledConf = "spark.security.credentials.kafka.enabled"
  val DefaultMechanism = "SCRAM-SHA-512"
  val DefaultSecurityProtocol = "SASL_SSL"

  /** Spark's alias for a cluster's token in the Hadoop credentials. */
  def alias(clusterId: String): Text = new Text(s"kafka.server.delegation.token.$clusterId")

  /** The JAAS entry of a token login: Kafka's SCRAM module, its user and password from the handler. */
  private[security] val TokenJaasConfig: String = s"${classOf[ScramLoginModule].getName} required tokenauth=true;"

  /**
   * The token of the cluster that matches `bootstrapServers`, if Spark holds one; fails when tokens of
   * several clusters match, as Spark's `kafka` source does.
   */
  def find(
      bootstrapServers: String,
      conf: SparkConf,
      credentials: Credentials
  ): Option[SparkKafkaToken] = if (!conf.getBoolean(EnabledConf, defaultValue = true)) None
  else {
    val clusters = conf.getAllWithPrefix(ClustersPrefix).toMap
    val ids = clusters.keys.collect {
      case k if k.endsWith(".auth.bootstrap.servers") =>
        k.stripSuffix(".auth.bootstrap.servers")
    }.toSeq.sorted
    val servers = bootstrapServers.split(",").map(_.trim).filter(_.nonEmpty)
    val matching = ids.flatMap { id =>
      val regex = clusters.getOrElse(s"$id.target.bootstrap.servers.regex", ".*")
      Option(credentials.getToken(alias(id))).filter(_ => servers.exists(_.matches(regex))).map { token =>
        SparkKafkaToken(
          id,
          new String(token.getIdentifier, UTF_8),
          new String(token.getPassword, UTF_8), // Spark's provider stores the HMAC in base64
          clusters.getOrElse(s"$id.sasl.token.mechanism", DefaultMechanism),
          clusters.getOrElse(s"$id.security.protocol", DefaultSecurityProtocol)
        )
      }
    }
    if (matching.size > 1) throw KafkaShareErrors.delegationTokenAmbiguous(matching.map(_.clusterId), bootstrapServers)
    matching.headOption
  }

  /** [[find]], with this JVM's Spark conf and the credentials of `user` (Spark's user on an executor). */
  def current(
      bootstrapServers: String,
      user: UserGroupInformation = UserGroupInformation.getCurrentUser
  ): Option[SparkKafkaToken] =
    Option(SparkEnv.get).flatMap(env => find(bootstrapServers, env.conf, user.getCredentials))

  /**
   * `settings` (a client's, with Kafka's names) and a login with Spark's token for `token`'s cluster,
   * unless the user chose how to log in: a `sasl.jaas.config` or `sasl.client.callback.handler.class`
   * of theirs, or a global JAAS `KafkaClient` entry in this JVM. Their `security.protocol` stays too.
   */
  def withLogin(
      settings: Map[String, String],
      token: Option[SparkKafkaToken],
      globalJaas: => Boolean = globalJaasProvided
  ): Map[String, String] = token match {
    case Some(t) if !UserLogin.exists(settings.contains) && !globalJaas =>
      if (!t.mechanism.startsWith("SCRAM")) throw KafkaShareErrors.delegationTokenMechanism(t.clusterId, t.mechanism)
      logDebug(s"Logging in to Kafka with $t, and with each token Spark obtains after it.")
      Map(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG -> t.securityProtocol) ++ settings ++ Map(
        SaslConfigs.SASL_JAAS_CONFIG -> TokenJaasConfig,
        SaslConfigs.SASL_MECHANISM -> t.mechanism,
        SaslConfigs.SASL_CLIENT_CALLBACK_HANDLER_CLASS -> classOf[SparkKafkaTokenCallbackHandler].getName
      )
    case _ => settings
  }

  /** Settings with which the user chose how a client logs in. */
  private val UserLogin = Seq(SaslConfigs.SASL_JAAS_CONFIG, SaslConfigs.SASL_CLIENT_CALLBACK_HANDLER_CLASS)

  /** [[withLogin]] with the token Spark holds for the cluster `settings` name, in this JVM. */
  def withCurrentLogin(settings: Map[String, String], bootstrapServers: String): Map[String, String] =
    withLogin(settings, current(bootstrapServers))

  /** Whether this JVM has a JAAS `KafkaClient` entry (`java.security.auth.login.config`), which wins. */
  def globalJaasProvided: Boolean =
    try {
      JaasContext.loadClientContext(java.util.Collections.emptyMap[String, AnyRef]())
      true
    } catch { case NonFatal(_) => false }
}
