package io.github.sparkkafkashare

import java.time.Duration

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{AcknowledgementMarks, HeldRecords, RecordCoordinates}
import io.github.sparkkafkashare.errors.{KafkaShareIllegalArgumentException, KafkaShareThrowable}
import io.github.sparkkafkashare.offsets.KafkaShareSourceOffset
import io.github.sparkkafkashare
  .options.{AcceptPoint, AcknowledgmentMode, BrokerDeadLetters, ConflictingSparkSetting, ExactlyOnceStrategy, KafkaConnection, KafkaShareSourceOptions, KafkaShareSparkConf, StartingOffsets, Subscription}
import io.github.sparkkafkashare.planning.ShareConsumerSettings
import org.apache.kafka.clients.consumer.{AcknowledgeType, ConsumerRecord}
import org.apache.spark.SparkConf
import org.apache.spark.sql.util.CaseInsensitiveStringMap
import org.scalatest.funsuite.AnyFunSuite

class KafkaShareSourceOptionsSuite extends AnyFunSuite {

  private val required = Map(
    "kafka.bootstrap.servers" -> "b1:9092,b2:9092",
    "kafka.share.group.id" -> "orders-workers",
    "subscribe" -> "orders, payments"
  )

  private def parse(options: Map[String, String]): KafkaShareSourceOptions =
    KafkaShareSourceOptions.parse(new CaseInsensitiveStringMap(options.asJava))

  private def failure(options: Map[String, String]): KafkaShareThrowable =
    intercept[KafkaShareIllegalArgumentException](parse(options))

  test("defaults of a minimal query") {
    val o = parse(required)
    assert(o.connection == KafkaConnection("b1:9092,b2:9092", "orders-workers", Map.empty))
    assert(o.subscription == Subscription.Topics(Seq("orders", "payments")))
    assert(o.parallelism.isEmpty)
    assert(o.acknowledgmentMode == AcknowledgmentMode.Implicit)
    assert(o.exactlyOnceStrategy == ExactlyOnceStrategy.None && o.acceptPoint == AcceptPoint.AfterCommit)
    assert(!o.includeHeaders && o.maxRecordsPerTrigger.isEmpty && o.lockTimeoutMs.isEmpty && o.startingOffsets.isEmpty)
    assert(o.partitionMaxRecordLocks.isEmpty && o.assignmentIntervalMs.isEmpty)
    assert(o.pollTimeoutMs == KafkaShareSourceOptions.DefaultPollTimeoutMs)
    assert(o.connection.apiTimeoutMs == KafkaShareSourceOptions.DefaultApiTimeoutMs)
    assert(o.fetchOffsetNumRetries == KafkaShareSourceOptions.DefaultFetchOffsetNumRetries)
  }

  test("typed values, case-insensitive names, and pass-through Kafka settings without our own") {
    val o = parse(required - "subscribe" ++ Map(
      "SUBSCRIBEPATTERN" -> "orders-.*",
      "kafka.share.parallelism" -> "8",
      "kafka.share.exactly.once.strategy" -> "IDEMPOTENT",
      "kafka.share.lock.timeout.ms" -> "45000",
      "KAFKA.SHARE.PARTITION.MAX.RECORD.LOCKS" -> "4000",
      "kafka.share.assignment.interval.ms" -> "0",
      "includeHeaders" -> "true",
      "maxRecordsPerTrigger" -> "1000",
      "pollTimeoutMs" -> "500",
      "startingOffsets" -> "pt30m",
      "FETCHOFFSET.NUMRETRIES" -> "0",
      "kafka.security.protocol" -> "SASL_SSL",
      "kafka.default.api.timeout.ms" -> "5000"
    ))
    assert(o.subscription == Subscription.TopicPattern("orders-.*"))
    assert(o.parallelism.contains(8) && o.lockTimeoutMs.contains(45000L) && o.maxRecordsPerTrigger.contains(1000L))
    assert(o.exactlyOnceStrategy == ExactlyOnceStrategy.Idempotent && o.includeHeaders && o.pollTimeoutMs == 500)
    assert(o.startingOffsets.contains(StartingOffsets("by_duration:PT30M")) && o.partitionMaxRecordLocks.contains(4000))
    assert(o.assignmentIntervalMs.contains(0))
    assert(o.connection.kafkaParams == Map("security.protocol" -> "SASL_SSL", "default.api.timeout.ms" -> "5000"))
    assert(o.connection.apiTimeoutMs == 5000 && o.fetchOffsetNumRetries == 0)
    val afterLog =
      parse(required ++ Map(
        "kafka.share.exactly.once.strategy" -> "two-phase-commit",
        "KAFKA.SHARE.ACKNOWLEDGE" -> "After-Log"
      ))
    assert(afterLog.acceptPoint == AcceptPoint.AfterLog && afterLog.connection.kafkaParams.isEmpty)
  }

  test("startingOffsets accepts earliest, latest and Kafka's by_duration form") {
    assert(parse(required + ("startingOffsets" -> "EARLIEST")).startingOffsets.contains(StartingOffsets("earliest")))
    assert(parse(required + ("startingOffsets" -> "latest")).startingOffsets.contains(StartingOffsets("latest")))
    assert(parse(required + ("startingOffsets" -> "by_duration:P1D")).startingOffsets.contains(
      StartingOffsets("by_duration:P1D")
    ))
    assert(failure(required + ("startingOffsets" -> "-PT1H")).getCondition == "KAFKA_SHARE_INVALID_OPTION_VALUE")
    // Kafka's prefix is lower case only; a duration whose sum is not negative is taken as it is.
    assert(
      failure(required + ("startingOffsets" -> "BY_DURATION:P1D")).getCondition == "KAFKA_SHARE_INVALID_OPTION_VALUE"
    )
    assert(
      parse(required + ("startingOffsets" -> "-PT0S")).startingOffsets.contains(StartingOffsets("by_duration:-PT0S"))
    )
    assert(parse(required + ("startingOffsets" -> "P-1DT25H")).startingOffsets.contains(
      StartingOffsets("by_duration:P-1DT25H")
    ))
  }

  test("each bad input names its condition and option, and carries the condition's SQL state") {
    val sqlStates = Map(
      "KAFKA_SHARE_MISSING_OPTION" -> "42601",
      "KAFKA_SHARE_NO_SUBSCRIPTION" -> "42601",
      "KAFKA_SHARE_CONFLICTING_OPTIONS" -> "42613",
      "KAFKA_SHARE_INVALID_OPTION_VALUE" -> "42616",
      "KAFKA_SHARE_UNSUPPORTED_OPTION" -> "0A000",
      "KAFKA_SHARE_INVALID_KAFKA_CONFIG" -> "42616",
      "KAFKA_SHARE_OWNED_KAFKA_CONFIG" -> "42616",
      "KAFKA_SHARE_UNKNOWN_OPTION" -> "42616"
    )
    val cases = Seq(
      (required - "kafka.bootstrap.servers", "KAFKA_SHARE_MISSING_OPTION", "kafka.bootstrap.servers"),
      (required - "kafka.share.group.id", "KAFKA_SHARE_MISSING_OPTION", "kafka.share.group.id"),
      (required - "subscribe", "KAFKA_SHARE_NO_SUBSCRIPTION", "subscribePattern"),
      (required + ("subscribePattern" -> "x"), "KAFKA_SHARE_CONFLICTING_OPTIONS", "subscribePattern"),
      (required + ("subscribe" -> " , "), "KAFKA_SHARE_INVALID_OPTION_VALUE", "subscribe"),
      (required + ("assign" -> "{}"), "KAFKA_SHARE_UNSUPPORTED_OPTION", "assign"),
      (required + ("maxoffsetspertrigger" -> "10"), "KAFKA_SHARE_UNSUPPORTED_OPTION", "use 'maxRecordsPerTrigger'"),
      (required + ("kafka.share.parallelism" -> "0"), "KAFKA_SHARE_INVALID_OPTION_VALUE", "kafka.share.parallelism"),
      (
        required + ("kafka.share.parallelism" -> "3000000000"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "kafka.share.parallelism"
      ),
      (
        required + ("kafka.share.partition.max.record.locks" -> "0"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "kafka.share.partition.max.record.locks"
      ),
      (
        required + ("kafka.share.partition.max.record.locks" -> "3000000000"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "kafka.share.partition.max.record.locks"
      ),
      (
        required + ("kafka.share.assignment.interval.ms" -> "-1"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "kafka.share.assignment.interval.ms"
      ),
      (
        required + ("kafka.default.api.timeout.ms" -> "0"),
        "KAFKA_SHARE_INVALID_KAFKA_CONFIG",
        "kafka.default.api.timeout.ms"
      ),
      (
        required + ("kafka.default.api.timeout.ms" -> "-1"),
        "KAFKA_SHARE_INVALID_KAFKA_CONFIG",
        "kafka.default.api.timeout.ms"
      ),
      (
        required + ("kafka.default.api.timeout.ms" -> " 00 "),
        "KAFKA_SHARE_INVALID_KAFKA_CONFIG",
        "kafka.default.api.timeout.ms"
      ),
      (
        required + ("maxRecordsPerTrigger" -> "9223372036854775808"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "maxRecordsPerTrigger"
      ),
      (required + ("kafka.share.acknowledgment.mode" -> "auto"), "KAFKA_SHARE_INVALID_OPTION_VALUE", "implicit"),
      (
        required + ("kafka.share.exactly.once.strategy" -> "exactly"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "two-phase-commit"
      ),
      (required + ("kafka.GROUP.ID" -> "x"), "KAFKA_SHARE_OWNED_KAFKA_CONFIG", "kafka.GROUP.ID"),
      (required + ("kafka.client.id" -> "x"), "KAFKA_SHARE_OWNED_KAFKA_CONFIG", "kafka.client.id"),
      (
        required + ("kafka.share.record.lock.duration.ms" -> "1"),
        "KAFKA_SHARE_OWNED_KAFKA_CONFIG",
        "kafka.share.lock.timeout.ms"
      ),
      (required + ("kafka.share.delivery.count.limit" -> "3"), "KAFKA_SHARE_OWNED_KAFKA_CONFIG", "kafka-configs"),
      (
        required + ("kafka.errors.deadletterqueue.topic.name" -> "dlq.orders"),
        "KAFKA_SHARE_OWNED_KAFKA_CONFIG",
        "use option 'kafka.share.dead.letter.topic'"
      ),
      (required + ("fetchOffset.numRetries" -> "-1"), "KAFKA_SHARE_INVALID_OPTION_VALUE", "fetchOffset.numRetries"),
      (required + ("kafka.share.acknowledge" -> "after-poll"), "KAFKA_SHARE_INVALID_OPTION_VALUE", "'after-log'"),
      (
        required + ("kafka.share.acknowledge" -> "after-log"),
        "KAFKA_SHARE_CONFLICTING_OPTIONS",
        "set kafka.share.exactly.once.strategy to 'two-phase-commit'"
      ),
      (
        required ++ Map(
          "kafka.share.acknowledge" -> "after-log",
          "kafka.share.exactly.once.strategy" -> "checkpoint-dedup"
        ),
        "KAFKA_SHARE_CONFLICTING_OPTIONS",
        "only a strategy that re-runs a batch from the records it logged"
      ),
      (
        required ++ Map(
          "kafka.share.acknowledge" -> "after-log",
          "kafka.share.exactly.once.strategy" -> "two-phase-commit",
          "kafka.share.acknowledgment.mode" -> "explicit"
        ),
        "KAFKA_SHARE_CONFLICTING_OPTIONS",
        "or kafka.share.acknowledgment.mode to 'implicit'"
      ),
      (
        required + ("kafka.share.exactly.once.stratgy" -> "two-phase-commit"),
        "KAFKA_SHARE_UNKNOWN_OPTION",
        "did you mean 'kafka.share.exactly.once.strategy'?"
      ),
      (
        required + ("kafka.share.dead.letter.copy.record" -> "true"),
        "KAFKA_SHARE_MISSING_OPTION",
        "Option 'kafka.share.dead.letter.topic' is required. Option 'kafka.share.dead.letter.copy.record' applies"
      ),
      (
        required ++ Map(
          "kafka.share.dead.letter.topic" -> "dlq.orders",
          "kafka.share.dead.letter.copy.record" -> "yes"
        ),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "Invalid value 'yes' for option 'kafka.share.dead.letter.copy.record': expected 'true' or 'false'"
      ),
      (
        required + ("kafka.share.dead.letter.topic" -> "dlq orders"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "Invalid value 'dlq orders' for option 'kafka.share.dead.letter.topic': expected a Kafka topic name"
      ),
      (
        required + ("kafka.share.dead.letter.topic" -> ("dlq." + "x" * 250)),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "expected a Kafka topic name"
      ),
      (
        required + ("kafka.share.dead.letter.topic" -> "__dlq"),
        "KAFKA_SHARE_INVALID_OPTION_VALUE",
        "does not start with '__'"
      ),
      (
        required + ("kafka.share.dead.letter.topic" -> "payments"),
        "KAFKA_SHARE_CONFLICTING_OPTIONS",
        "Options 'kafka.share.dead.letter.topic', 'subscribe' cannot be used together. The query reads topic 'payments'"
      ),
      (
        required - "subscribe" ++ Map(
          "subscribePattern" -> "dlq\\..*",
          "kafka.share.dead.letter.topic" -> "dlq.orders"
        ),
        "KAFKA_SHARE_CONFLICTING_OPTIONS",
        "'kafka.share.dead.letter.topic', 'subscribePattern'"
      ),
      (
        required + ("kafka.share.dead.letter.topik" -> "dlq.orders"),
        "KAFKA_SHARE_UNKNOWN_OPTION",
        "did you mean 'kafka.share.dead.letter.topic'?"
      )
    )
    cases.foreach { case (options, condition, named) =>
      val e = failure(options)
      assert(e.getCondition == condition, s"$options")
      assert(e.getSqlState == sqlStates(condition), condition)
      assert(e.asInstanceOf[Exception].getMessage.startsWith(s"[$condition] "))
      assert(e.asInstanceOf[Exception].getMessage.contains(named), s"$condition should name $named")
    }
  }

  test("the broker's dead-letter topic: parsed once, and never passed to Kafka") {
    assert(parse(required).brokerDeadLetters.isEmpty)
    val topicOnly = parse(required + ("kafka.share.dead.letter.topic" -> " dlq.orders "))
    assert(topicOnly.brokerDeadLetters.contains(BrokerDeadLetters("dlq.orders", None)))
    assert(topicOnly.connection.kafkaParams.isEmpty)
    val copied = parse(required ++ Map(
      "KAFKA.SHARE.DEAD.LETTER.TOPIC" -> "dlq.orders",
      "kafka.share.dead.letter.copy.record" -> "TRUE"
    ))
    assert(copied.brokerDeadLetters.contains(BrokerDeadLetters("dlq.orders", Some(true))))
    assert(copied.connection.kafkaParams.isEmpty)
    // A pattern that does not match the topic, and an empty value, which leaves the option unset.
    val pattern = parse(required - "subscribe" ++ Map(
      "subscribePattern" -> "orders.*",
      "kafka.share.dead.letter.topic" -> "dlq.orders"
    ))
    assert(pattern.brokerDeadLetters.map(_.topic).contains("dlq.orders"))
    assert(parse(required + ("kafka.share.dead.letter.topic" -> " ")).brokerDeadLetters.isEmpty)
    // Its bad values are cases of "each bad input names its condition and option".
  }

  test("pass-through values Kafka's consumer refuses fail at load(), without showing the value") {
    val cases = Seq(
      "kafka.max.poll.records" -> ("hunter2", "expected a value of type INT, valid values: [1,...]"),
      "kafka.max.poll.records" -> ("-7", "expected a value of type INT, valid values: [1,...]"),
      "kafka.share.acquire.mode" -> (
        "hunter2",
        "expected a value of type STRING, valid values: [batch_optimized, record_limit]"
      ),
      "kafka.check.crcs" -> ("hunter2", "expected a value of type BOOLEAN")
    )
    cases.foreach { case (option, (value, expected)) =>
      val e = failure(required + (option -> value)).asInstanceOf[Exception]
      assert(
        e.getMessage.startsWith(s"[KAFKA_SHARE_INVALID_KAFKA_CONFIG] Kafka setting '$option' has a value"),
        e.getMessage
      )
      assert(e.getMessage.contains(s": $expected. Correct or remove it"), e.getMessage)
      assert(!e.getMessage.contains(value), e.getMessage)
    }
    // Values Kafka accepts and class names (maybe on the executors only) pass.
    parse(required ++ Map(
      "kafka.max.poll.records" -> "500",
      "kafka.share.acquire.mode" -> "record_limit",
      "kafka.sasl.login.callback.handler.class" -> "com.example.NotHere"
    ))
  }

  test("an option that is neither the source's nor a Kafka setting fails at load(), naming the one it likely meant") {
    def refusal(option: String) = {
      val e = failure(required + (option -> "x"))
      assert(e.getCondition == "KAFKA_SHARE_UNKNOWN_OPTION", option)
      e.asInstanceOf[Exception].getMessage
    }
    // A guarantee misspelled would otherwise pass to the Kafka client as an unused setting.
    assert(refusal("kafka.share.exactly.once.stratgy").contains("did you mean 'kafka.share.exactly.once.strategy'?"))
    assert(refusal("KAFKA.SHARE.PARALELLISM").contains("did you mean 'kafka.share.parallelism'?"))
    assert(refusal("kafka.share.no.such.option").startsWith("[KAFKA_SHARE_UNKNOWN_OPTION] Option " +
      "'kafka.share.no.such.option' is neither an option of the kafka-share source nor a Kafka client setting. " +
      "The source's own options that start with 'kafka.share.' are listed in the user guide"))
    assert(refusal("kafka.max.pol.records").contains("did you mean 'kafka.max.poll.records'?"))
    assert(
      refusal("kafka.Max.Poll.Records").contains("did you mean 'kafka.max.poll.records'?")
    ) // Kafka's names are lower case
    assert(refusal("kafka.no.such.setting").contains("A setting that a SASL login class, callback handler, metric " +
      "reporter or config provider reads passes once the plugin is set"))
    // Without the prefix: a letter or two from one of the source's options.
    assert(refusal("subscibe").contains("did you mean 'subscribe'?"))
    assert(refusal("maxRecordPerTrigger").contains("did you mean 'maxRecordsPerTrigger'?"))
    assert(refusal("startingOffset").contains("did you mean 'startingOffsets'?"))
    assert(refusal("includeHeader").contains("did you mean 'includeHeaders'?"))
    // Further off, an option is not taken for one of ours (Spark's sources ignore options they do not read).
    parse(required ++ Map("path" -> "x", "some.other.option" -> "y"))
    // A plugin Kafka hands every setting to may read settings of its own; near misses of Kafka's still fail.
    val withPlugin = required + ("kafka.sasl.client.callback.handler.class" -> "com.example.Handler")
    assert(
      parse(withPlugin + ("kafka.example.handler.role" -> "r")).connection.kafkaParams.contains("example.handler.role")
    )
    assert(failure(withPlugin + ("kafka.sasl.mechanisms" -> "PLAIN")).getCondition == "KAFKA_SHARE_UNKNOWN_OPTION")
    assert(parse(required + ("kafka.config.providers" -> "file") + ("kafka.config.providers.file.class" -> "C"))
      .connection.kafkaParams.contains("config.providers.file.class"))
  }

  test("spark.kafkaShare.consumer.cache.timeout takes Spark's duration forms, and a bad value names the conf") {
    val key = KafkaShareSparkConf.ConsumerCacheTimeout
    assert(KafkaShareSparkConf.consumerCacheTimeout(new SparkConf(false)) == Duration.ofMinutes(5))
    assert(KafkaShareSparkConf.consumerCacheTimeout(new SparkConf(false).set(key, "90s")) == Duration.ofSeconds(90))
    assert(KafkaShareSparkConf.consumerCacheTimeout(new SparkConf(false).set(key, "2m")) == Duration.ofMinutes(2))
    Seq("0s", "-1m", "soon").foreach { bad =>
      val e =
        intercept[KafkaShareIllegalArgumentException](KafkaShareSparkConf.consumerCacheTimeout(new SparkConf(false).set(
          key,
          bad
        )))
      assert(
        e.getCondition == "KAFKA_SHARE_INVALID_OPTION_VALUE" && e.getMessage.contains(key) && e.getMessage.contains(
          s"'$bad'"
        )
      )
    }
  }

  test("the strategies that log rounds refuse speculative execution; the others run with it") {
    val speculating = ConflictingSparkSetting.speculation(new SparkConf(false).set("spark.speculation", "true"))
    Seq("checkpoint-dedup", "two-phase-commit").foreach { strategy =>
      val options = parse(required + (KafkaShareSourceOptions.ExactlyOnceStrategyOption -> strategy))
      options.exactlyOnceStrategy.refuseConflicting(ConflictingSparkSetting.speculation(new SparkConf(false)))
      val e = intercept[KafkaShareIllegalArgumentException](options.exactlyOnceStrategy.refuseConflicting(speculating))
      assert(e.getCondition == "KAFKA_SHARE_CONFLICTING_OPTIONS" && e.getMessage.contains("spark.speculation=false") &&
        e.getMessage.contains(s"'$strategy'"))
    }
    Seq("none", "idempotent").foreach { strategy =>
      parse(required + (KafkaShareSourceOptions.ExactlyOnceStrategyOption -> strategy)).exactlyOnceStrategy
        .refuseConflicting(speculating)
    }
  }

  test(
    "share consumers always run in explicit mode, poll what the lock limit lets them hold (at least 10,000) unless told otherwise, and maxRecordsPerTrigger becomes a strict per-consumer cap"
  ) {
    val o = parse(required ++ Map("maxRecordsPerTrigger" -> "1001", "kafka.fetch.max.bytes" -> "1048576"))
    val settings = ShareConsumerSettings(
      o,
      parallelism = 4,
      runId = "0123456789abcdef",
      partitions = 8,
      recordLocksPerPartition = 2000
    )
    assert(settings("share.acknowledgement.mode") == "explicit")
    assert(settings("max.poll.records") == "251" && settings("share.acquire.mode") == "record_limit")
    assert(settings("group.id") == "orders-workers" && settings("bootstrap.servers") == "b1:9092,b2:9092")
    assert(settings("fetch.max.bytes") == "1048576")
    assert(settings("client.id") == ShareConsumerSettings.clientIdPrefix("orders-workers", "0123456789abcdef"))
    def pollSize(extra: Map[String, String], parallelism: Int, partitions: Int, locks: Int) =
      ShareConsumerSettings(parse(required ++ extra), parallelism, "r", partitions, locks)("max.poll.records")
    assert(pollSize(Map.empty, parallelism = 4, partitions = 4, locks = 2000) == "10000")
    assert(pollSize(Map.empty, parallelism = 1, partitions = 4, locks = 10000) == "40000", "four partitions' locks")
    assert(
      pollSize(Map.empty, parallelism = 2, partitions = 5, locks = 4000) == "12000",
      "three partitions for one of the two"
    )
    assert(
      pollSize(Map.empty, parallelism = 4, partitions = 0, locks = 2000) == "10000",
      "no subscribed topic exists yet"
    )
    assert(!ShareConsumerSettings(parse(required), 1, "r", 4, 10000).contains("share.acquire.mode"))
    assert(pollSize(Map("kafka.max.poll.records" -> "300"), parallelism = 1, partitions = 4, locks = 10000) == "300")
    val perTrigger = Map("maxRecordsPerTrigger" -> "100000")
    assert(
      pollSize(
        perTrigger + ("kafka.max.poll.records" -> "1000"),
        parallelism = 4,
        partitions = 4,
        locks = 2000
      ) == "1000",
      "the smaller of the user's poll size and the per-trigger share"
    )
    assert(pollSize(
      perTrigger + ("kafka.max.poll.records" -> "90000"),
      parallelism = 4,
      partitions = 4,
      locks = 2000
    ) == "25000")
  }

  test(
    "more consumers than partitions: each polls at most its even share of the group's lock limit, unless the user chose poll sizes"
  ) {
    def cap(extra: Map[String, String], parallelism: Int, partitions: Int, locks: Int = 2000) =
      ShareConsumerSettings.sharedPartitionCap(parse(required ++ extra), parallelism, partitions, locks)
    assert(cap(Map.empty, parallelism = 4, partitions = 1) == Some(500))
    assert(cap(Map.empty, parallelism = 3, partitions = 2, locks = 10000) == Some(6666))
    assert(cap(Map.empty, parallelism = 4, partitions = 4) == None, "a partition per consumer: no competition")
    assert(cap(Map.empty, parallelism = 4, partitions = 0) == None, "no subscribed topic exists yet")
    assert(cap(Map.empty, parallelism = 5000, partitions = 1) == Some(1))
    Seq(
      "kafka.max.poll.records" -> "300",
      "kafka.share.acquire.mode" -> "batch_optimized",
      "maxRecordsPerTrigger" -> "100"
    )
      .foreach(chosen => assert(cap(Map(chosen), 4, 1) == None, chosen))
    val settings =
      ShareConsumerSettings(parse(required), parallelism = 4, "r", partitions = 1, recordLocksPerPartition = 2000)
    assert(settings("max.poll.records") == "500" && settings("share.acquire.mode") == "record_limit")
  }

  test("offsets round-trip through the checkpoint's JSON, and foreign offsets are refused") {
    val offset = KafkaShareSourceOffset(42)
    assert(KafkaShareSourceOffset.fromJson(offset.json()) == offset)
    assert(intercept[IllegalStateException](KafkaShareSourceOffset.fromJson("""{"t":{"0":5}}""")).getMessage
      .contains("new checkpoint location"))
  }

  test("held records are accepted (or marked) once their round is committed and released otherwise") {
    val record = new ConsumerRecord("t", 0, 1L, Array[Byte](), Array[Byte]())
    val other = new ConsumerRecord("t", 0, 2L, Array[Byte](), Array[Byte]())
    val held = new HeldRecords(7, java.util.List.of(record, other), System.nanoTime())
    val none = AcknowledgementMarks.None
    assert(held.settlement(committedThrough = 7, none, record) == AcknowledgeType.ACCEPT)
    assert(held.settlement(committedThrough = 9, none, record) == AcknowledgeType.ACCEPT)
    assert(held.settlement(committedThrough = 6, none, record) == AcknowledgeType.RELEASE)

    val marks = AcknowledgementMarks(7, Map(RecordCoordinates("t", 0, 1L) -> AcknowledgeType.REJECT))
    assert(held.settlement(committedThrough = 7, marks, record) == AcknowledgeType.REJECT)
    assert(held.settlement(committedThrough = 7, marks, other) == AcknowledgeType.ACCEPT) // unmarked
    assert(held.settlement(committedThrough = 6, marks, record) == AcknowledgeType.RELEASE) // not committed
    val marksOfALaterRound = AcknowledgementMarks(8, marks.marks)
    assert(
      held.settlement(committedThrough = 8, marksOfALaterRound, record) == AcknowledgeType.RELEASE,
      "this round's marks were missed: release rather than undo a RELEASE"
    )
    assert(held.settlement(committedThrough = 8, AcknowledgementMarks(8, Map.empty), other) == AcknowledgeType.RELEASE)
    assert(
      held.settlement(committedThrough = 8, AcknowledgementMarks(6, marks.marks), record) == AcknowledgeType.ACCEPT,
      "older marks are not this round's"
    )
  }

  test("a round hands out what it holds and what lost its lock, never what another slot logged") {
    def at(offset: Long) = new ConsumerRecord("t", 0, offset, Array[Byte](), Array[Byte]())
    val held = new HeldRecords(
      7,
      java.util.List.of(at(1)),
      System.nanoTime(),
      hidden = Set(RecordCoordinates("t", 0, 3L)),
      unlocked = Seq(at(2), at(3))
    )
    assert(held.visible.asScala.map(_.offset()) == Seq(1L, 2L)) // every read of the round returns these
    assert(held.records.asScala.map(_.offset()) == Seq(1L)) // and only this one is acknowledged here
  }
}
