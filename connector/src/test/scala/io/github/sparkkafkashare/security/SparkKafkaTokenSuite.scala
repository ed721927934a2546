package io.github.sparkkafkashare.security

import java.nio.charset.StandardCharsets.UTF_8
import java.security.PrivilegedExceptionAction
import java.util.Base64
import javax.security.auth.callback.{NameCallback, PasswordCallback}

import io.github.sparkkafkashare.errors.KafkaShareIllegalArgumentException
import org.apache.hadoop.io.Text
import org.apache.hadoop.security.{Credentials, UserGroupInformation}
import org.apache.hadoop.security.token.{Token, TokenIdentifier}
import org.apache.kafka.common.config.SaslConfigs
import org.apache.kafka.common.security.scram.{ScramExtensionsCallback, ScramLoginModule}
import org.apache.spark.SparkConf
import org.scalatest.funsuite.AnyFunSuite

/** The login a client gets from the Kafka delegation tokens Spark put in the Hadoop credentials. */
class SparkKafkaTokenSuite extends AnyFunSuite {
  private val Servers = "broker1:9093,broker2:9093"
  private val TokenId = "tok-3f9a"
  private val Hmac = Array[Byte](1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
  private val HmacBase64 = Base64.getEncoder.encodeToString(Hmac)

  /** A token as Spark's Kafka provider stores it: the HMAC in base64 as its password. */
  private def token(id: String, hmac: Array[Byte]): Token[TokenIdentifier] = new Token[TokenIdentifier](
    id.getBytes(UTF_8),
    Base64.getEncoder.encodeToString(hmac).getBytes(UTF_8),
    new Text("KAFKA_DELEGATION_TOKEN"),
    new Text("kafka")
  )

  private def credentials(clusters: String*): Credentials = {
    val c = new Credentials()
    clusters.foreach(id => c.addToken(SparkKafkaToken.alias(id), token(TokenId, Hmac)))
    c
  }

  private def conf(pairs: (String, String)*): SparkConf = {
    val c = new SparkConf(false)
    pairs.foreach { case (k, v) => c.set(k, v) }
    c
  }

  private val clusterA = Seq(
    "spark.kafka.clusters.a.auth.bootstrap.servers" -> "broker1:9092",
    "spark.kafka.clusters.a.target.bootstrap.servers.regex" -> "broker1:.*"
  )

  private def login(settings: Map[String, String], token: Option[SparkKafkaToken]) =
    SparkKafkaToken.withLogin(settings, token, globalJaas = false)

  test("a token of the matched cluster, from the current user's credentials, sets a SCRAM token login") {
    val ugi = UserGroupInformation.createRemoteUser("executor")
    ugi.addToken(SparkKafkaToken.alias("a"), token(TokenId, Hmac))
    val found = ugi.doAs(new PrivilegedExceptionAction[Option[SparkKafkaToken]] {
      override def run(): Option[SparkKafkaToken] =
        SparkKafkaToken.find(Servers, conf(clusterA: _*), UserGroupInformation.getCurrentUser.getCredentials)
    })
    assert(found.map(_.tokenId).contains(TokenId))
    val settings = login(Map("bootstrap.servers" -> Servers), found)
    assert(settings(SaslConfigs.SASL_JAAS_CONFIG) == s"${classOf[ScramLoginModule].getName} required tokenauth=true;")
    assert(settings(SaslConfigs.SASL_CLIENT_CALLBACK_HANDLER_CLASS) == classOf[SparkKafkaTokenCallbackHandler].getName)
    assert(settings(SaslConfigs.SASL_MECHANISM) == "SCRAM-SHA-512")
    assert(!settings.values.exists(_.contains(HmacBase64)), "no setting holds the token's password")
    assert(settings("security.protocol") == "SASL_SSL")
  }

  test("the cluster's sasl.token.mechanism and security.protocol count; the user's security.protocol wins") {
    val c = conf(clusterA ++ Seq(
      "spark.kafka.clusters.a.sasl.token.mechanism" -> "SCRAM-SHA-256",
      "spark.kafka.clusters.a.security.protocol" -> "SASL_PLAINTEXT"
    ): _*)
    val found = SparkKafkaToken.find(Servers, c, credentials("a"))
    val settings = login(Map.empty, found)
    assert(settings(SaslConfigs.SASL_MECHANISM) == "SCRAM-SHA-256")
    assert(settings("security.protocol") == "SASL_PLAINTEXT")
    assert(login(Map("security.protocol" -> "SASL_SSL"), found)("security.protocol") == "SASL_SSL")
  }

  test("no cluster whose regex matches, or no token of the matched cluster: nothing") {
    val elsewhere = conf(
      "spark.kafka.clusters.a.auth.bootstrap.servers" -> "other:9092",
      "spark.kafka.clusters.a.target.bootstrap.servers.regex" -> "other:.*"
    )
    assert(SparkKafkaToken.find(Servers, elsewhere, credentials("a")).isEmpty)
    assert(SparkKafkaToken.find(Servers, conf(clusterA: _*), credentials("b")).isEmpty)
    assert(SparkKafkaToken.find(Servers, conf(), credentials("a")).isEmpty)
    assert(login(Map("bootstrap.servers" -> Servers), None) == Map("bootstrap.servers" -> Servers))
  }

  test("the default regex matches every server, as Spark's") {
    val c = conf("spark.kafka.clusters.a.auth.bootstrap.servers" -> "broker1:9092")
    assert(SparkKafkaToken.find(Servers, c, credentials("a")).map(_.clusterId).contains("a"))
  }

  test("the user's own sasl.jaas.config or client callback handler wins, and so does a global JAAS entry") {
    val found = SparkKafkaToken.find(Servers, conf(clusterA: _*), credentials("a"))
    val own = Map(SaslConfigs.SASL_JAAS_CONFIG -> "mine", SaslConfigs.SASL_MECHANISM -> "PLAIN")
    assert(login(own, found) == own)
    val handler = Map(SaslConfigs.SASL_CLIENT_CALLBACK_HANDLER_CLASS -> "com.example.Handler")
    assert(login(handler, found) == handler)
    assert(SparkKafkaToken.withLogin(Map("a" -> "b"), found, globalJaas = true) == Map("a" -> "b"))
  }

  test("spark.security.credentials.kafka.enabled=false: nothing") {
    val off = conf(clusterA :+ (SparkKafkaToken.EnabledConf -> "false"): _*)
    assert(SparkKafkaToken.find(Servers, off, credentials("a")).isEmpty)
  }

  test("tokens of two matched clusters fail, naming the clusters") {
    val two = conf(clusterA ++ Seq("spark.kafka.clusters.b.auth.bootstrap.servers" -> "broker2:9092"): _*)
    val e = intercept[KafkaShareIllegalArgumentException](SparkKafkaToken.find(Servers, two, credentials("a", "b")))
    assert(e.condition == "KAFKA_SHARE_DELEGATION_TOKEN_AMBIGUOUS")
    assert(e.getMessage.contains("(a, b)"))
    assert(!e.getMessage.contains(HmacBase64))
  }

  test("a token that is not SCRAM's is refused") {
    val c = conf(clusterA :+ ("spark.kafka.clusters.a.sasl.token.mechanism" -> "PLAIN"): _*)
    val found = SparkKafkaToken.find(Servers, c, credentials("a"))
    val e = intercept[KafkaShareIllegalArgumentException](login(Map.empty, found))
    assert(e.condition == "KAFKA_SHARE_DELEGATION_TOKEN_MECHANISM")
    assert(e.getMessage.contains("'PLAIN'"))
    assert(!e.getMessage.contains(HmacBase64))
  }

  test("the HMAC is never in toString") {
    val found = SparkKafkaToken.find(Servers, conf(clusterA: _*), credentials("a")).get
    assert(!found.toString.contains(HmacBase64))
    assert(found.toString.contains("redacted"))
  }

  /** What the handler answers to one SCRAM login, as Kafka's SCRAM client asks: name, extensions, password. */
  private def scramLogin(handler: SparkKafkaTokenCallbackHandler): (String, String, java.util.Map[String, String]) = {
    val name = new NameCallback("Name:")
    val extensions = new ScramExtensionsCallback()
    val password = new PasswordCallback("Password:", false)
    Seq(name, extensions, password).foreach(c => handler.handle(Array(c)))
    (name.getName, new String(password.getPassword), extensions.extensions())
  }

  test("each login answers with the token Spark holds then: a re-authentication after a renewal uses the new one") {
    var held = credentials("a")
    val handler = new SparkKafkaTokenCallbackHandler(servers => SparkKafkaToken.find(servers, conf(clusterA: _*), held))
    handler.configure(java.util.Map.of("bootstrap.servers", java.util.List.of("broker1:9093")), "SCRAM-SHA-512", null)
    assert(scramLogin(handler) == ((TokenId, HmacBase64, java.util.Map.of("tokenauth", "true"))))
    held = new Credentials()
    held.addToken(SparkKafkaToken.alias("a"), token("tok-new", Array[Byte](9, 9, 9)))
    assert(scramLogin(handler) == ((
      "tok-new",
      Base64.getEncoder.encodeToString(Array[Byte](9, 9, 9)),
      java.util.Map.of("tokenauth", "true")
    )))
    held = new Credentials()
    val e = intercept[KafkaShareIllegalArgumentException](scramLogin(handler))
    assert(e.condition == "KAFKA_SHARE_DELEGATION_TOKEN_GONE")
    assert(e.getMessage.contains("broker1:9093"))
  }

}
