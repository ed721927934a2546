package io.github.sparkkafkashare.options

import java.time.Duration
import java.util.Locale
import java.util.regex.{Pattern, PatternSyntaxException}

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.clients.ShadedKafkaNames
import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.kafka.common.config.{ConfigDef, ConfigException}
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** How records are acknowledged to the share group. */
private[sparkkafkashare] sealed abstract class AcknowledgmentMode(val name: String)
private[sparkkafkashare] object AcknowledgmentMode {

  /** Every record of a committed batch is ACCEPTed. */
  case object Implicit extends AcknowledgmentMode("implicit")

  /** User code marks records ACCEPT, RELEASE or REJECT inside foreachBatch; see KafkaShareAcknowledgements. */
  case object Explicit extends AcknowledgmentMode("explicit")
  val all: Seq[AcknowledgmentMode] = Seq(Implicit, Explicit)
}

private[sparkkafkashare] sealed trait Subscription
private[sparkkafkashare] object Subscription {
  final case class Topics(topics: Seq[String]) extends Subscription
  final case class TopicPattern(regex: String) extends Subscription {
    @transient lazy val pattern: Pattern = Pattern.compile(regex)
  }
}

/**
 * Where a new share group starts reading: the group config `share.auto.offset.reset`.
 * Kafka applies it only when a share-partition is first initialized, so an existing group keeps
 * its position whatever this says.
 */
private[sparkkafkashare] final case class StartingOffsets(groupConfigValue: String)

/**
 * How to reach the share group: what both the source and the group-state API need.
 *
 * @param kafkaParams the pass-through `kafka.*` settings with the prefix removed, minus the
 *                    settings this source owns. Values may be secrets: never log them.
 */
private[sparkkafkashare] final case class KafkaConnection(
    bootstrapServers: String,
    groupId: String,
    kafkaParams: Map[String, String]
) {

  /** Bound on every Admin call the driver makes, so an unreachable cluster fails instead of hanging. */
  def apiTimeoutMs: Long = KafkaShareSourceOptions.apiTimeoutMs(kafkaParams)

  /**
   * The pass-through settings for a Kafka client, those `known` to it, with Kafka's class names as
   * the shaded client has them; Kafka's system properties are mirrored first ([[ShadedKafkaNames]]).
   * Called right before a client is created, on the JVM that creates it.
   */
  def clientSettings(known: String => Boolean = _ => true): Map[String, String] = {
    ShadedKafkaNames.mirrorSystemProperties()
    ShadedKafkaNames.withClientClassNames(kafkaParams.filter { case (key, _) => known(key) })
  }
}

/**
 * The options of one kafka-share query, parsed and checked once (at `load()`), in the spirit of
 * Spark's KafkaSourceProvider (option names, `kafka.*` pass-through) and Delta's DeltaOptions
 * (typed values, cross-option checks, one error factory).
 */
private[sparkkafkashare] final case class KafkaShareSourceOptions(
    connection: KafkaConnection,
    subscription: Subscription,
    parallelism: Option[Int],
    acknowledgmentMode: AcknowledgmentMode,
    exactlyOnceStrategy: ExactlyOnceStrategy,
    lockTimeoutMs: Option[Long],
    partitionMaxRecordLocks: Option[Int],
    assignmentIntervalMs: Option[Int],
    includeHeaders: Boolean,
    maxRecordsPerTrigger: Option[Long],
    pollTimeoutMs: Long,
    startingOffsets: Option[StartingOffsets],
    fetchOffsetNumRetries: Int
) {
  def groupId: String = connection.groupId
}

private[sparkkafkashare] object KafkaShareSourceOptions {
  val BootstrapServers = "kafka.bootstrap.servers"
  val GroupId = "kafka.share.group.id"
  val Parallelism = "kafka.share.parallelism"
  val AcknowledgmentModeOption = "kafka.share.acknowledgment.mode"
  val ExactlyOnceStrategyOption = "kafka.share.exactly.once.strategy"
  val LockTimeoutMs = "kafka.share.lock.timeout.ms"
  val PartitionMaxRecordLocks = "kafka.share.partition.max.record.locks"
  val AssignmentIntervalMs = "kafka.share.assignment.interval.ms"
  val Subscribe = "subscribe"
  val SubscribePattern = "subscribePattern"
  val Assign = "assign"
  val IncludeHeaders = "includeHeaders"
  val MaxRecordsPerTrigger = "maxRecordsPerTrigger"
  val PollTimeoutMs = "pollTimeoutMs"
  val StartingOffsetsOption = "startingOffsets"

  /** Spark's kafka source name for how many failed driver lookups in a row a running query survives. */
  val FetchOffsetNumRetries = "fetchOffset.numRetries"

  val DefaultPollTimeoutMs = 2000L
  val DefaultApiTimeoutMs = 30000L

  /** Kafka's client setting that bounds a call; checked here as the driver's Admin calls need it positive. */
  val ApiTimeoutConfig = "default.api.timeout.ms"

  /** [[ApiTimeoutConfig]] of Kafka client settings, or the source's default. */
  def apiTimeoutMs(kafkaSettings: Map[String, String]): Long =
    kafkaSettings.get(ApiTimeoutConfig).map(_.trim.toLong).getOrElse(DefaultApiTimeoutMs)
  val DefaultFetchOffsetNumRetries = 3

  /** Our own options that do not start with `kafka.`. */
  private val sourceOptions =
    Set(
      Subscribe,
      SubscribePattern,
      IncludeHeaders,
      MaxRecordsPerTrigger,
      PollTimeoutMs,
      StartingOffsetsOption,
      FetchOffsetNumRetries
    )

  /** Our own options that start with `kafka.`: they are never passed to the Kafka client. */
  private val sourceOwnedKafkaOptions =
    Set(
      GroupId,
      Parallelism,
      AcknowledgmentModeOption,
      ExactlyOnceStrategyOption,
      LockTimeoutMs,
      PartitionMaxRecordLocks,
      AssignmentIntervalMs
    )

  /** Kafka client settings the source sets itself, or that a share consumer rejects, with why. */
  private val ownedKafkaConfigs: Map[String, String] = {
    val sourceOwned = Map(
      "group.id" -> s"the source sets it from option '$GroupId'.",
      "group.type" -> "the source always uses a share group.",
      "key.deserializer" -> "keys are always returned as binary; cast or decode the 'key' column.",
      "value.deserializer" -> "values are always returned as binary; cast or decode the 'value' column.",
      "share.acknowledgement.mode" ->
        s"the source acknowledges records itself after Spark commits each batch; see option '$AcknowledgmentModeOption'.",
      "client.id" -> "the source names each consumer after the group and its slot."
    )
    // Kafka's names of the share group's own configs: a client ignores them, so a query would run without.
    val groupConfig = "it is a share group config, not a client setting;"
    val onTheGroup = "set it on the group with Kafka's kafka-configs tool (--entity-type groups)."
    val groupConfigs = Map(
      "share.auto.offset.reset" -> s"$groupConfig use option '$StartingOffsetsOption'.",
      "share.record.lock.duration.ms" -> s"$groupConfig use option '$LockTimeoutMs'."
    ) ++
      Seq(
        "share.session.timeout.ms",
        "share.heartbeat.interval.ms",
        "share.delivery.count.limit",
        "share.isolation.level",
        "share.renew.acknowledge.enable",
        "share.assignor.offload.enable"
      )
        .map(_ -> s"$groupConfig $onTheGroup")
    val rejectedByShareConsumer = Seq(
      "enable.auto.commit",
      "auto.commit.interval.ms",
      "auto.offset.reset",
      "group.instance.id",
      "partition.assignment.strategy",
      "interceptor.classes",
      "group.protocol",
      "group.remote.assignor"
    )
      .map(_ -> "Kafka share consumers do not accept it (share groups manage offsets and membership on the broker).")
    val replacedByGroupConfig = Seq("isolation.level", "session.timeout.ms", "heartbeat.interval.ms")
      .map(c =>
        c -> s"Kafka share consumers do not accept it; a share group has config 'share.$c' instead: $onTheGroup"
      )
    sourceOwned ++ groupConfigs ++ rejectedByShareConsumer ++ replacedByGroupConfig
  }

  /**
   * Options of Spark's `kafka` source that have no meaning for a share group, with what to use
   * instead. Spark ignores options a source does not read, so a query moved from `kafka` to
   * `kafka-share` would otherwise run without them, unbounded batches in place of
   * `maxOffsetsPerTrigger` for one.
   */
  private val sparkKafkaSourceOptions: Map[String, String] = {
    val byTimestamp = s"a share group starts every partition at one place; use '$StartingOffsetsOption' with a " +
      "duration back from now, such as 'PT1H'."
    val ending =
      "a kafka-share query reads a stream, which has no end; Trigger.AvailableNow reads what is there and stops."
    val partitions = s"each task of a batch is one of the query's share consumers; set how many with '$Parallelism'."
    val minimum =
      s"a batch takes what the consumers acquire and is not held back for more; bound it with '$MaxRecordsPerTrigger'."
    Map(
      Assign -> s"share groups assign partitions on the broker and cannot read chosen partitions; use '$Subscribe' or '$SubscribePattern'.",
      "maxOffsetsPerTrigger" -> s"a share group hands out records, not offset ranges; use '$MaxRecordsPerTrigger'.",
      "minOffsetsPerTrigger" -> minimum,
      "maxTriggerDelay" -> minimum,
      "minPartitions" -> partitions,
      "maxRecordsPerPartition" -> partitions,
      "startingOffsetsByTimestamp" -> byTimestamp,
      "startingTimestamp" -> byTimestamp,
      "startingOffsetsByTimestampStrategy" -> byTimestamp,
      "endingOffsets" -> ending,
      "endingOffsetsByTimestamp" -> ending,
      "endingTimestamp" -> ending,
      "failOnDataLoss" -> ("a share group has no such check: when retention deletes records the group has not read, " +
        "the broker moves the group past them. Remove the option."),
      "kafkaConsumer.pollTimeoutMs" -> s"use '$PollTimeoutMs'.",
      "fetchOffset.retryIntervalMs" -> (s"a failed lookup of the driver is retried at the next batch; " +
        s"'$FetchOffsetNumRetries' sets how many in a row a running query waits through."),
      "groupIdPrefix" -> s"a share group is named, not generated; use '$GroupId'."
    )
  }

  /** The bootstrap servers, group id and pass-through Kafka settings, checked. */
  def parseConnection(options: CaseInsensitiveStringMap): KafkaConnection = {
    def get(name: String): Option[String] = Option(options.get(name)).map(_.trim).filter(_.nonEmpty)
    val bootstrapServers = get(BootstrapServers).getOrElse(throw KafkaShareErrors.missingOption(
      BootstrapServers,
      "Set it to the Kafka brokers to connect to, for example \"host1:9092,host2:9092\"."
    ))
    val groupId = get(GroupId).getOrElse(throw KafkaShareErrors.missingOption(
      GroupId,
      "Set it to the share group this query consumes as; queries with the same group split the records."
    ))

    // Spark lower-cases option names; keep the user's spelling for the pass-through keys.
    val kafkaParams = options.asCaseSensitiveMap().asScala.toMap.collect {
      case (key, value)
          if key.toLowerCase(Locale.ROOT).startsWith("kafka.") &&
            !sourceOwnedKafkaOptions.contains(key.toLowerCase(Locale.ROOT)) =>
        key.substring("kafka.".length) -> value
    }
    kafkaParams.keys.foreach { key =>
      ownedKafkaConfigs.get(key.toLowerCase(Locale.ROOT)).foreach(reason =>
        throw KafkaShareErrors.ownedKafkaConfig(s"kafka.$key", reason)
      )
    }
    OptionNames.checkKafkaSettings(kafkaParams.keySet, sourceOwnedKafkaOptions)
    checkKafkaValues(kafkaParams)
    // Kafka allows 0, but the driver bounds each of its Admin calls with it.
    if (kafkaParams.get(ApiTimeoutConfig).exists(v => Parsing.int(v.trim).contains(0))) {
      throw KafkaShareErrors.invalidKafkaConfig(
        s"kafka.$ApiTimeoutConfig",
        "expected a positive number of milliseconds (it bounds every Admin call of the driver)"
      )
    }
    KafkaConnection(bootstrapServers, groupId, kafkaParams - "bootstrap.servers")
  }

  /**
   * Pass-through values Kafka's consumer would refuse (`kafka.max.poll.records=abc`) fail at load()
   * rather than in the query's first task. Settings the consumer does not know are left to Kafka, and
   * class names too: a class may be on the executors' class path only.
   */
  private def checkKafkaValues(kafkaParams: Map[String, String]): Unit = {
    val consumerKeys = ConsumerConfig.configDef().configKeys()
    for ((name, value) <- kafkaParams; key <- Option(consumerKeys.get(name)) if key.`type` != ConfigDef.Type.CLASS) {
      try {
        val parsed = ConfigDef.parseType(name, value, key.`type`)
        Option(key.validator).foreach(_.ensureValid(name, parsed))
      } catch {
        case _: ConfigException =>
          // The validator prints as Kafka's documentation shows "Valid Values".
          val allowed = Option(key.validator).map(v => s", valid values: $v").getOrElse("")
          throw KafkaShareErrors.invalidKafkaConfig(s"kafka.$name", s"expected a value of type ${key.`type`}$allowed")
      }
    }
  }

  def parse(options: CaseInsensitiveStringMap): KafkaShareSourceOptions = {
    val connection = parseConnection(options)
    def get(name: String): Option[String] = Option(options.get(name)).map(_.trim).filter(_.nonEmpty)

    sparkKafkaSourceOptions.find { case (option, _) => options.containsKey(option) }.foreach { case (option, reason) =>
      throw KafkaShareErrors.unsupportedOption(option, reason)
    }
    OptionNames.checkSourceOptions(
      options.asCaseSensitiveMap().keySet().asScala.toSet,
      sourceOptions ++ sparkKafkaSourceOptions.keySet
    )
    val subscription = (get(Subscribe), get(SubscribePattern)) match {
      case (Some(_), Some(_)) => throw KafkaShareErrors.conflictingOptions(
          Seq(Subscribe, SubscribePattern),
          "Give either a list of topics or a pattern, not both."
        )
      case (Some(list), None) =>
        val topics = list.split(",").map(_.trim).filter(_.nonEmpty).toSeq.distinct
        if (topics.isEmpty) {
          throw KafkaShareErrors.invalidOptionValue(Subscribe, list, "expected a comma-separated list of topic names")
        }
        Subscription.Topics(topics)
      case (None, Some(regex)) =>
        try Pattern.compile(regex)
        catch {
          case e: PatternSyntaxException =>
            throw KafkaShareErrors.invalidOptionValue(
              SubscribePattern,
              regex,
              s"expected a Java regex (${e.getDescription})"
            )
        }
        Subscription.TopicPattern(regex)
      case (None, None) => throw KafkaShareErrors.noSubscription()
    }

    val acknowledgmentMode = oneOf(get(AcknowledgmentModeOption), AcknowledgmentModeOption, AcknowledgmentMode.all)(
      _.name
    ).getOrElse(AcknowledgmentMode.Implicit)
    val strategy =
      oneOf(get(ExactlyOnceStrategyOption), ExactlyOnceStrategyOption, ExactlyOnceStrategy.all)(_.name).getOrElse(
        ExactlyOnceStrategy.None
      )

    KafkaShareSourceOptions(
      connection = connection,
      subscription = subscription,
      parallelism = positiveInt(get(Parallelism), Parallelism),
      acknowledgmentMode = acknowledgmentMode,
      exactlyOnceStrategy = strategy,
      lockTimeoutMs = positiveLong(get(LockTimeoutMs), LockTimeoutMs),
      partitionMaxRecordLocks = positiveInt(get(PartitionMaxRecordLocks), PartitionMaxRecordLocks),
      assignmentIntervalMs = nonNegativeInt(get(AssignmentIntervalMs), AssignmentIntervalMs),
      includeHeaders = boolean(get(IncludeHeaders), IncludeHeaders).getOrElse(false),
      maxRecordsPerTrigger = positiveLong(get(MaxRecordsPerTrigger), MaxRecordsPerTrigger),
      pollTimeoutMs = positiveLong(get(PollTimeoutMs), PollTimeoutMs).getOrElse(DefaultPollTimeoutMs),
      startingOffsets = get(StartingOffsetsOption).map(startingOffsets),
      fetchOffsetNumRetries = nonNegativeInt(get(FetchOffsetNumRetries), FetchOffsetNumRetries)
        .getOrElse(DefaultFetchOffsetNumRetries)
    )
  }

  private def oneOf[T](value: Option[String], option: String, choices: Seq[T])(name: T => String): Option[T] =
    value.map { v =>
      choices.find(c => name(c).equalsIgnoreCase(v)).getOrElse(throw KafkaShareErrors.invalidOptionValue(
        option,
        v,
        "expected one of " + choices.map(c => s"'${name(c)}'").mkString(", ")
      ))
    }

  private def positiveLong(value: Option[String], option: String): Option[Long] = value.map { v =>
    Parsing.long(v).filter(_ > 0).getOrElse(throw KafkaShareErrors.invalidOptionValue(
      option,
      v,
      "expected a positive whole number"
    ))
  }

  private def positiveInt(value: Option[String], option: String): Option[Int] = positiveLong(value, option).map { n =>
    if (n > Int.MaxValue) throw KafkaShareErrors.invalidOptionValue(option, n.toString, "expected at most 2147483647")
    n.toInt
  }

  private def nonNegativeInt(value: Option[String], option: String): Option[Int] = value.map { v =>
    Parsing.int(v).filter(_ >= 0).getOrElse(throw KafkaShareErrors.invalidOptionValue(
      option,
      v,
      "expected a whole number from 0 to 2147483647"
    ))
  }

  private def boolean(value: Option[String], option: String): Option[Boolean] = value.map { v =>
    Parsing.boolean(v).getOrElse(throw KafkaShareErrors.invalidOptionValue(option, v, "expected 'true' or 'false'"))
  }

  /** `earliest`, `latest`, or an ISO-8601 duration back from now (`PT1H`, or Kafka's `by_duration:PT1H`). */
  private def startingOffsets(value: String): StartingOffsets = value.toLowerCase(Locale.ROOT) match {
    case "earliest" | "latest" => StartingOffsets(value.toLowerCase(Locale.ROOT))
    case _ =>
      val iso = value.stripPrefix("by_duration:")
      val ok =
        try !Duration.parse(iso).isNegative
        catch { case _: Exception => false }
      if (!ok) {
        throw KafkaShareErrors.invalidOptionValue(
          StartingOffsetsOption,
          value,
          "expected 'earliest', 'latest', or a non-negative ISO-8601 duration back from now such as 'PT30M' or 'P1D'"
        )
      }
      StartingOffsets(s"by_duration:${iso.toUpperCase(Locale.ROOT)}")
  }
}
