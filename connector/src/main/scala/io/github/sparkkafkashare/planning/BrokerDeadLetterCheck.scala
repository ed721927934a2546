package io.github.sparkkafkashare.planning

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.kafka.common.config.ConfigResource
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException
import org.apache.spark.internal.Logging

/**
 * Whether the cluster can run the broker's dead letters (`kafka.share.dead.letter.topic`, Kafka 4.4's
 * dead-letter queues): the share.version it finalized, and whether the broker can write the topic.
 */
private[planning] final class BrokerDeadLetterCheck(calls: AdminCalls) extends Logging {
  import calls.{admin, await}
  import ShareGroupConfigs._

  private val servers = calls.connection.bootstrapServers

  /**
   * Fails unless the cluster's finalized share.version `level` has Kafka 4.4's dead-letter queues on
   * (share.version 2): an older cluster would refuse the group config, or take it and write nothing.
   */
  def checkShareVersion(level: Int): Unit =
    if (level < ShareVersionOfDeadLetters) {
      throw KafkaShareErrors.brokerDeadLettersUnsupported(
        servers,
        level.toString,
        KafkaShareSourceOptions.DeadLetterTopic
      )
    }

  /**
   * Fails unless the broker can write dead letters to `topic`. Kafka 4.4 checks the topic only as it
   * writes, and archives the record if it cannot: a name without the cluster's prefix, a topic that
   * does not exist (unless the cluster creates it), or one without
   * `errors.deadletterqueue.group.enable=true`. The checks need DESCRIBE_CONFIGS on the cluster and
   * on the topic; one refused is logged and skipped, as the source needs neither to run.
   */
  def checkTopic(topic: String): Unit = {
    def unusable(problem: String, fix: String) =
      KafkaShareErrors.brokerDeadLetterTopicUnusable(KafkaShareSourceOptions.DeadLetterTopic, topic, problem, fix)
    val broker = brokerDeadLetterConfigs()
    val prefix = broker.map(_._1).getOrElse(DefaultDeadLetterTopicPrefix)
    if (broker.isDefined && !topic.startsWith(prefix)) {
      throw unusable(
        s"does not start with '$prefix', the prefix the cluster requires (broker config $DeadLetterTopicPrefixConfig)",
        s"Name a topic that starts with '$prefix'."
      )
    }
    val resource = new ConfigResource(ConfigResource.Type.TOPIC, topic)
    val described =
      try Some(await(
          s"reading the configs of dead-letter topic '$topic'",
          admin.describeConfigs(Seq(resource).asJava).all()
        ))
      catch {
        case _: UnknownTopicOrPartitionException => None
        case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.NotAuthorized =>
          logWarning(s"Not checking that the broker can write dead letters to topic '$topic': ${e.getMessage}")
          return
      }
    described.flatMap(c => Option(c.get(resource))) match {
      case None if broker.exists(_._2) =>
        logInfo(s"Dead-letter topic '$topic' does not exist yet; the cluster creates it ($DeadLetterAutoCreateConfig)")
      case None =>
        throw unusable(
          "does not exist, and the cluster does not create it",
          s"Create it: kafka-topics.sh --bootstrap-server $servers --create --topic $topic " +
            s"--config $DeadLetterTopicEnableConfig=true (or set broker config $DeadLetterAutoCreateConfig=true)."
        )
      case Some(config)
          if !Option(config.get(DeadLetterTopicEnableConfig)).exists(e => "true".equalsIgnoreCase(e.value())) =>
        throw unusable(
          s"does not let share groups write to it (topic config $DeadLetterTopicEnableConfig is not true)",
          s"Allow it: kafka-configs.sh --bootstrap-server $servers --alter --entity-type topics --entity-name $topic " +
            s"--add-config $DeadLetterTopicEnableConfig=true."
        )
      case Some(_) =>
    }
    if (broker.isEmpty && !topic.startsWith(DefaultDeadLetterTopicPrefix)) {
      logWarning(
        s"Dead-letter topic '$topic' does not start with Kafka's default prefix '$DefaultDeadLetterTopicPrefix'; " +
          s"the broker writes to it only if the cluster's $DeadLetterTopicPrefixConfig allows it."
      )
    }
  }

  /** The cluster's dead-letter prefix and auto-creation, as a broker describes them; None if refused. */
  private def brokerDeadLetterConfigs(): Option[(String, Boolean)] =
    try {
      val nodes = await("describing the cluster", admin.describeCluster().nodes()).asScala
      nodes.headOption.map { node =>
        val resource = new ConfigResource(ConfigResource.Type.BROKER, node.idString())
        val configs = await(
          s"reading the dead-letter configs of broker ${node.idString()}",
          admin.describeConfigs(Seq(resource).asJava).all()
        ).get(resource)
        def value(name: String) = Option(configs).flatMap(c => Option(c.get(name))).flatMap(e => Option(e.value()))
        (
          value(DeadLetterTopicPrefixConfig).getOrElse(DefaultDeadLetterTopicPrefix),
          value(DeadLetterAutoCreateConfig).exists(_.equalsIgnoreCase("true"))
        )
      }
    } catch {
      case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.NotAuthorized =>
        logWarning(s"Not checking the cluster's dead-letter topic prefix: ${e.getMessage}")
        None
    }
}
