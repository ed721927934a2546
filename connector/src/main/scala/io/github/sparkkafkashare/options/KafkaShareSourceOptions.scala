package io.github.sparkkafkashare.options

import java.time.Duration
import java.util.Locale
import java.util.regex.{Pattern, PatternSyntaxException}

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.kafka.common.config.{ConfigDef, ConfigException}
import org.apache.kafka.common.errors.InvalidTopicException
import org.apache.kafka.common.internals.Topic
import org.apache.spark.sql.util.CaseInsensitiveStringMap

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
    acknowledge: Option[AcceptPoint],
    lockTimeoutMs: Option[Long],
    partitionMaxRecordLocks: Option[Int],
    assignmentIntervalMs: Option[Int],
    includeHeaders: Boolean,
    maxRecordsPerTrigger: Option[Long],
    pollTimeoutMs: Long,
    startingOffsets: Option[StartingOffsets],
    fetchOffsetNumRetries: Int,
    allowNonAtomicCreate: Boolean = false,
    brokerDeadLetters: Option[BrokerDeadLetters] = None
) {
  def groupId: String = connection.groupId

  /** The accept point the option sets, or `after-commit`; in real-time mode an unset option leaves it to the sink. */
  def acceptPoint: AcceptPoint = acknowledge.getOrElse(AcceptPoint.AfterCommit)
}

private[sparkkafkashare] object KafkaShareSourceOptions {
  val BootstrapServers = "kafka.bootstrap.servers"
  val GroupId = "kafka.share.group.id"
  val Parallelism = "kafka.share.parallelism"
  val AcknowledgmentModeOption = "kafka.share.acknowledgment.mode"
  val ExactlyOnceStrategyOption = "kafka.share.exactly.once.strategy"
  val AcknowledgeOption = "kafka.share.acknowledge"
  val LockTimeoutMs = "kafka.share.lock.timeout.ms"
  val PartitionMaxRecordLocks = "kafka.share.partition.max.record.locks"
  val AssignmentIntervalMs = "kafka.share.assignment.interval.ms"

  /** The share group's dead-letter topic, which the broker writes (group config `errors.deadletterqueue.topic.name`). */
  val DeadLetterTopic = "kafka.share.dead.letter.topic"

  /** Whether the broker copies a dead-lettered record's key, value and headers (`errors.deadletterqueue.copy.record.enable`). */
  val DeadLetterCopyRecord = "kafka.share.dead.letter.copy.record"

  /** Whether a strategy that logs records may run on a checkpoint store where two writers of a file can both win. */
  val AllowNonAtomicCreate = "kafka.share.checkpoint.allow.non.atomic.create"
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
      AcknowledgeOption,
      LockTimeoutMs,
      PartitionMaxRecordLocks,
      AssignmentIntervalMs,
      AllowNonAtomicCreate,
      DeadLetterTopic,
      DeadLetterCopyRecord
    )

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
      RefusedOptions.kafkaConfigs.get(key.toLowerCase(Locale.ROOT)).foreach(reason =>
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

    RefusedOptions.sparkKafkaSourceOptions.find { case (option, _) => options.containsKey(option) }.foreach {
      case (option, reason) =>
        throw KafkaShareErrors.unsupportedOption(option, reason)
    }
    OptionNames.checkSourceOptions(
      options.asCaseSensitiveMap().keySet().asScala.toSet,
      sourceOptions ++ RefusedOptions.sparkKafkaSourceOptions.keySet
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
    val acknowledge = oneOf(get(AcknowledgeOption), AcknowledgeOption, AcceptPoint.all)(_.name)
    acknowledge.foreach(_.refuseWith(strategy, acknowledgmentMode))

    KafkaShareSourceOptions(
      connection = connection,
      subscription = subscription,
      parallelism = positiveInt(get(Parallelism), Parallelism),
      acknowledgmentMode = acknowledgmentMode,
      exactlyOnceStrategy = strategy,
      acknowledge = acknowledge,
      lockTimeoutMs = positiveLong(get(LockTimeoutMs), LockTimeoutMs),
      partitionMaxRecordLocks = positiveInt(get(PartitionMaxRecordLocks), PartitionMaxRecordLocks),
      assignmentIntervalMs = nonNegativeInt(get(AssignmentIntervalMs), AssignmentIntervalMs),
      includeHeaders = boolean(get(IncludeHeaders), IncludeHeaders).getOrElse(false),
      maxRecordsPerTrigger = positiveLong(get(MaxRecordsPerTrigger), MaxRecordsPerTrigger),
      pollTimeoutMs = positiveLong(get(PollTimeoutMs), PollTimeoutMs).getOrElse(DefaultPollTimeoutMs),
      startingOffsets = get(StartingOffsetsOption).map(startingOffsets),
      fetchOffsetNumRetries = nonNegativeInt(get(FetchOffsetNumRetries), FetchOffsetNumRetries)
        .getOrElse(DefaultFetchOffsetNumRetries),
      allowNonAtomicCreate = boolean(get(AllowNonAtomicCreate), AllowNonAtomicCreate).getOrElse(false),
      brokerDeadLetters = brokerDeadLetters(get(DeadLetterTopic), get(DeadLetterCopyRecord), subscription)
    )
  }

  /**
   * [[DeadLetterTopic]] and [[DeadLetterCopyRecord]]: a topic name Kafka accepts, not an internal one
   * (Kafka refuses those for a dead-letter topic) nor one the query reads (dead letters would come
   * back as records); the copy setting only with a topic.
   */
  private def brokerDeadLetters(
      topic: Option[String],
      copyRecord: Option[String],
      subscription: Subscription
  ): Option[BrokerDeadLetters] = {
    val copy = boolean(copyRecord, DeadLetterCopyRecord)
    if (topic.isEmpty && copy.isDefined) {
      throw KafkaShareErrors.missingOption(
        DeadLetterTopic,
        s"Option '$DeadLetterCopyRecord' applies to the broker's dead-letter topic, which '$DeadLetterTopic' names."
      )
    }
    topic.map { name =>
      try Topic.validate(name)
      catch {
        case e: InvalidTopicException =>
          throw KafkaShareErrors.invalidOptionValue(
            DeadLetterTopic,
            name,
            s"expected a Kafka topic name (${e.getMessage})"
          )
      }
      if (name.startsWith("__")) {
        throw KafkaShareErrors.invalidOptionValue(
          DeadLetterTopic,
          name,
          "expected a topic name that does not start with '__', which Kafka keeps for its internal topics"
        )
      }
      val read = subscription match {
        case Subscription.Topics(topics) => topics.contains(name)
        case p: Subscription.TopicPattern => p.pattern.matcher(name).matches()
      }
      if (read) {
        throw KafkaShareErrors.conflictingOptions(
          Seq(DeadLetterTopic, if (subscription.isInstanceOf[Subscription.Topics]) Subscribe else SubscribePattern),
          s"The query reads topic '$name', so its dead letters would come back to it as records. Name another topic."
        )
      }
      BrokerDeadLetters(name, copy)
    }
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
