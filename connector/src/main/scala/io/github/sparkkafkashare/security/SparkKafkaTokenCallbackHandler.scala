package io.github.sparkkafkashare.security

import java.util.{List => JList, Map => JMap}
import javax.security.auth.callback.{Callback, NameCallback, PasswordCallback, UnsupportedCallbackException}
import javax.security.auth.login.AppConfigurationEntry

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.hadoop.security.UserGroupInformation
import org.apache.kafka.clients.CommonClientConfigs
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler
import org.apache.kafka.common.security.scram.ScramExtensionsCallback

/**
 * Answers a client's SCRAM login with the Kafka delegation token Spark holds in this JVM at that
 * moment. Every login reads it anew, re-authentication included, so a client created before Spark
 * obtained its newest token goes on working once the older one expires, even while idle between
 * batches (a broker with `connections.max.reauth.ms` has each session log in again).
 */
private[sparkkafkashare] final class SparkKafkaTokenCallbackHandler(tokenFor: String => Option[SparkKafkaToken])
  extends AuthenticateCallbackHandler {

  /**
   * Kafka's: the token Spark holds for the user who creates the client. Kafka logs in under a subject
   * of its own, where the current user is not Spark's (an executor's tokens are Spark's user's).
   */
  def this() = this({
    val user = UserGroupInformation.getCurrentUser
    servers => SparkKafkaToken.current(servers, user)
  })

  @volatile private var bootstrapServers: String = ""
  // The token of the login under way: Kafka asks for the name and then the password in two calls.
  @volatile private var token: Option[SparkKafkaToken] = None

  override def configure(
      configs: JMap[String, _],
      saslMechanism: String,
      jaasConfigEntries: JList[AppConfigurationEntry]
  ): Unit =
    bootstrapServers = configs.get(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG) match {
      case servers: JList[_] => servers.asScala.mkString(",")
      case servers => String.valueOf(servers)
    }

  override def handle(callbacks: Array[Callback]): Unit = callbacks.foreach {
    case name: NameCallback =>
      val now = current()
      token = Some(now)
      name.setName(now.tokenId)
    case password: PasswordCallback => password.setPassword(token.getOrElse(current()).hmac.toCharArray)
    case extensions: ScramExtensionsCallback => extensions.extensions(Map("tokenauth" -> "true").asJava)
    case other => throw new UnsupportedCallbackException(other)
  }

  private def current(): SparkKafkaToken =
    tokenFor(bootstrapServers).getOrElse(throw KafkaShareErrors.delegationTokenGone(bootstrapServers))

  override def close(): Unit = ()
}
