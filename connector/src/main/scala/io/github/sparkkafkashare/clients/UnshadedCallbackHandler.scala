package io.github.sparkkafkashare.clients

import java.lang.reflect.InvocationTargetException
import java.util.{List => JList, Map => JMap}
import javax.security.auth.callback.{Callback, UnsupportedCallbackException}
import javax.security.auth.login.AppConfigurationEntry

import scala.jdk.CollectionConverters._

import org.apache.kafka.common.config.{ConfigException, SaslConfigs}
import org.apache.kafka.common.config.types.Password
import org.apache.kafka.common.security.auth.{AuthenticateCallbackHandler, SaslExtensions, SaslExtensionsCallback}
import org.apache.kafka.common.security.oauthbearer.{OAuthBearerToken, OAuthBearerTokenCallback}

/**
 * Lets the shaded client use a SASL callback handler compiled against Kafka's own, unshaded
 * interfaces, as cloud providers ship them (AWS MSK IAM's `IAMOAuthBearerLoginCallbackHandler` and
 * `IAMClientCallbackHandler`): the shaded client only takes handlers of its own shaded
 * `AuthenticateCallbackHandler`. [[ShadedKafkaNames.withClientClassNames]] puts this class in place
 * of such a handler and keeps the handler's name under [[UnshadedCallbackHandler.targetKey]]. This
 * loads it, with Kafka's unshaded classes from the application's classpath (the provider's library
 * needs kafka-clients there), and hands it Kafka's own types: settings of Kafka's types and its
 * callbacks, whose answers (a token, SASL extensions) are copied back.
 */
private[sparkkafkashare] abstract class UnshadedCallbackHandler(setting: String) extends AuthenticateCallbackHandler {
  import ShadedKafkaNames.inKafkaNames

  private var target: AnyRef = _
  private var loader: ClassLoader = _

  override def configure(
      configs: JMap[String, _],
      saslMechanism: String,
      jaasConfigEntries: JList[AppConfigurationEntry]
  ): Unit = {
    val className = String.valueOf(configs.get(UnshadedCallbackHandler.targetKey(setting)))
    loader = Option(Thread.currentThread().getContextClassLoader).getOrElse(getClass.getClassLoader)
    val handlerClass =
      try Class.forName(className, true, loader)
      catch {
        case e @ (_: ClassNotFoundException | _: LinkageError) => throw new ConfigException(
            s"Class $className of option 'kafka.$setting' could not be loaded (${e.getClass.getSimpleName}: ${e.getMessage}): " +
              "add its jar, and the jars it needs (Kafka's kafka-clients among them), to the application's classpath"
          )
      }
    val kafkaInterface = kafkaCounterpart(classOf[AuthenticateCallbackHandler])
    if (kafkaInterface.forall(!_.isAssignableFrom(handlerClass))) {
      throw new ConfigException(
        s"Class $className of option 'kafka.$setting' is not a Kafka AuthenticateCallbackHandler" +
          kafkaInterface.fold(" (Kafka's kafka-clients is not on the application's classpath)")(_ => "")
      )
    }
    target = newInstance(handlerClass)
    val entries = jaasConfigEntries.asScala.map(e =>
      new AppConfigurationEntry(inKafkaNames(e.getLoginModuleName), e.getControlFlag, e.getOptions)
    ).asJava
    invoke(
      target,
      "configure",
      Seq(classOf[JMap[_, _]], classOf[String], classOf[JList[_]]),
      configs.asScala.map { case (k, v) => k -> inKafkaTypes(v) }.asJava,
      saslMechanism,
      entries
    )
  }

  override def handle(callbacks: Array[Callback]): Unit = {
    val asKafka = callbacks.map(c => c -> inKafkaTypes(c))
    try invoke(target, "handle", Seq(classOf[Array[Callback]]), asKafka.map(_._2.asInstanceOf[Callback]))
    catch {
      case e: UnsupportedCallbackException =>
        throw new UnsupportedCallbackException(
          asKafka.find(_._2 eq e.getCallback).fold(e.getCallback)(_._1),
          e.getMessage
        )
    }
    asKafka.foreach { case (shaded, kafkas) => copyAnswer(shaded, kafkas) }
  }

  override def close(): Unit = if (target != null) invoke(target, "close", Nil)

  /** Kafka's own counterpart of one of the shaded client's classes, if the application's kafka-clients has it. */
  private def kafkaCounterpart(shaded: Class[_]): Option[Class[_]] =
    try Some(Class.forName(inKafkaNames(shaded.getName), false, loader))
    catch { case _: ClassNotFoundException => None }

  private def newInstance(c: Class[_]): AnyRef = c.getDeclaredConstructor().newInstance().asInstanceOf[AnyRef]

  /** A setting or callback of the shaded client's types as Kafka's own; any other value as it is. */
  private def inKafkaTypes(value: Any): AnyRef = value match {
    case s: String => inKafkaNames(s)
    case c: Class[_] => kafkaCounterpart(c).getOrElse(c)
    // Every kafka-clients with an AuthenticateCallbackHandler (configure found one) has Password.
    case p: Password =>
      kafkaCounterpart(classOf[Password]).get.getConstructor(classOf[String]).newInstance(p.value).asInstanceOf[AnyRef]
    case l: JList[_] => l.asScala.map(inKafkaTypes).asJava
    case c: Callback if c.isInstanceOf[OAuthBearerTokenCallback] || c.isInstanceOf[SaslExtensionsCallback] =>
      kafkaCounterpart(c.getClass).fold[AnyRef](c)(newInstance) // SaslExtensionsCallback is new in Kafka 2.1
    case other => other.asInstanceOf[AnyRef]
  }

  private def copyAnswer(shaded: Callback, kafkas: AnyRef): Unit = shaded match {
    case c: OAuthBearerTokenCallback if kafkas ne c =>
      Option(invoke(kafkas, "token", Nil)) match {
        case Some(token) => c.token(new KafkaToken(token))
        case None => Option(invoke(kafkas, "errorCode", Nil)).foreach { code =>
            c.error(
              code.toString,
              invoke(kafkas, "errorDescription", Nil).asInstanceOf[String],
              invoke(kafkas, "errorUri", Nil).asInstanceOf[String]
            )
          }
      }
    case c: SaslExtensionsCallback if kafkas ne c =>
      Option(invoke(kafkas, "extensions", Nil)).foreach { extensions =>
        c.extensions(new SaslExtensions(invoke(extensions, "map", Nil).asInstanceOf[JMap[String, String]]))
      }
    case _ =>
  }

  /** A token of Kafka's own type, as the shaded client's. */
  private final class KafkaToken(token: AnyRef) extends OAuthBearerToken {
    override def value(): String = invoke(token, "value", Nil).asInstanceOf[String]
    override def scope(): java.util.Set[String] = invoke(token, "scope", Nil).asInstanceOf[java.util.Set[String]]
    override def lifetimeMs(): Long = invoke(token, "lifetimeMs", Nil).asInstanceOf[java.lang.Long]
    override def principalName(): String = invoke(token, "principalName", Nil).asInstanceOf[String]
    override def startTimeMs(): java.lang.Long = invoke(token, "startTimeMs", Nil).asInstanceOf[java.lang.Long]
  }

  /** Calls a public method of Kafka's types, on whatever class implements it (a token's may not be public). */
  private def invoke(on: AnyRef, method: String, parameterTypes: Seq[Class[_]], args: AnyRef*): AnyRef = {
    val m = on.getClass.getMethod(method, parameterTypes: _*)
    m.trySetAccessible()
    try m.invoke(on, args: _*)
    catch { case e: InvocationTargetException => throw e.getCause }
  }
}

/** For `kafka.sasl.login.callback.handler.class` (OAUTHBEARER's token, for example). */
private[sparkkafkashare] final class UnshadedLoginCallbackHandler
  extends UnshadedCallbackHandler(SaslConfigs.SASL_LOGIN_CALLBACK_HANDLER_CLASS)

/** For `kafka.sasl.client.callback.handler.class` (a SASL mechanism's credentials). */
private[sparkkafkashare] final class UnshadedClientCallbackHandler
  extends UnshadedCallbackHandler(SaslConfigs.SASL_CLIENT_CALLBACK_HANDLER_CLASS)

private[sparkkafkashare] object UnshadedCallbackHandler {

  /** The bridge for each handler setting. */
  val Bridges: Map[String, Class[_ <: UnshadedCallbackHandler]] = Map(
    SaslConfigs.SASL_LOGIN_CALLBACK_HANDLER_CLASS -> classOf[UnshadedLoginCallbackHandler],
    SaslConfigs.SASL_CLIENT_CALLBACK_HANDLER_CLASS -> classOf[UnshadedClientCallbackHandler]
  )

  /** Where the client's settings keep the handler a bridge stands in for (Kafka passes unknown settings on). */
  def targetKey(setting: String): String = s"kafka-share.unshaded.$setting"
}
