package io.github.sparkkafkashare.errors

import org.apache.kafka.common.KafkaException
import org.apache.kafka.common.errors.{AuthenticationException, AuthorizationException}
import org.apache.spark.ErrorClassesJsonReader

import io.github.sparkkafkashare.clients.ShadedKafkaNames

/**
 * Every error the kafka-share source raises, built from `error/kafka-share-error-conditions.json`
 * so that messages, conditions and SQL states live in one place (as in Spark's own connectors).
 *
 * Messages name the option at fault and say how to fix it. They never echo the value of a
 * pass-through `kafka.*` setting: those can hold credentials (`kafka.sasl.jaas.config`).
 */
private[sparkkafkashare] object KafkaShareErrors {

  private lazy val reader = new ErrorClassesJsonReader(
    Seq(getClass.getClassLoader.getResource("error/kafka-share-error-conditions.json"))
  )

  private def message(condition: String, params: Map[String, String]): String =
    s"[$condition] " + reader.getErrorMessage(condition, params)

  /** The condition's SQL state from our file: Spark's default looks in Spark's own, which has none of ours. */
  def sqlState(condition: String): String = reader.getSqlState(condition)

  private def invalid(condition: String, params: (String, String)*): KafkaShareIllegalArgumentException = {
    val map = params.toMap
    new KafkaShareIllegalArgumentException(condition, map, message(condition, map))
  }

  def missingOption(option: String, hint: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_MISSING_OPTION", "option" -> option, "hint" -> hint)

  def invalidOptionValue(option: String, value: String, allowed: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_INVALID_OPTION_VALUE", "option" -> option, "value" -> value, "allowed" -> allowed)

  def conflictingOptions(options: Seq[String], hint: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_CONFLICTING_OPTIONS", "options" -> options.map(o => s"'$o'").mkString(", "), "hint" -> hint)

  def noSubscription(): KafkaShareIllegalArgumentException = invalid("KAFKA_SHARE_NO_SUBSCRIPTION")

  def unsupportedOption(option: String, reason: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_UNSUPPORTED_OPTION", "option" -> option, "reason" -> reason)

  def unknownOption(option: String, meant: Option[String], hint: String): KafkaShareIllegalArgumentException =
    invalid(
      "KAFKA_SHARE_UNKNOWN_OPTION",
      "option" -> option,
      "meant" -> meant.fold("")(m => s": did you mean '$m'?"),
      "hint" -> hint
    )

  def ownedKafkaConfig(option: String, reason: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_OWNED_KAFKA_CONFIG", "option" -> option, "reason" -> reason)

  def invalidKafkaConfig(option: String, expected: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_INVALID_KAFKA_CONFIG", "option" -> option, "expected" -> expected)

  def delegationTokenAmbiguous(clusters: Seq[String], servers: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_DELEGATION_TOKEN_AMBIGUOUS", "clusters" -> clusters.mkString(", "), "servers" -> servers)

  def delegationTokenMechanism(cluster: String, mechanism: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_DELEGATION_TOKEN_MECHANISM", "cluster" -> cluster, "mechanism" -> mechanism)

  def delegationTokenGone(servers: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_DELEGATION_TOKEN_GONE", "servers" -> servers)

  def acknowledgeNeedsExplicitMode(option: String): KafkaShareUnsupportedOperationException =
    unsupported("KAFKA_SHARE_ACKNOWLEDGE_NEEDS_EXPLICIT_MODE", "option" -> option)

  def notAShareBatch(sources: Int): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_ACKNOWLEDGE_NOT_A_SHARE_BATCH", "sources" -> sources.toString)

  def invalidMarks(problem: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_ACKNOWLEDGE_INVALID_MARKS", "problem" -> problem)

  def invalidDeadLetterInput(problem: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_DEAD_LETTER_INVALID_INPUT", "problem" -> problem)

  def deadLetterTopicTwice(topic: String, option: String, brokerTopic: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_DEAD_LETTER_TOPIC_TWICE", "topic" -> topic, "option" -> option, "brokerTopic" -> brokerTopic)

  def marksOutsideBatch(records: Seq[String]): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_ACKNOWLEDGE_RECORD_NOT_IN_BATCH", "records" -> records.mkString(", "))

  private def unsupported(condition: String, params: (String, String)*): KafkaShareUnsupportedOperationException = {
    val map = params.toMap
    new KafkaShareUnsupportedOperationException(condition, map, message(condition, map))
  }

  def batchReadUnsupported(): KafkaShareUnsupportedOperationException =
    unsupported("KAFKA_SHARE_BATCH_READ_UNSUPPORTED")

  /** `builtFor` and `found` as "Spark 4.0, 4.1 with Scala 2.13" and "Spark 3.5.2 with Scala 2.12.18". */
  def sparkUnsupported(builtFor: String, found: String): KafkaShareUnsupportedOperationException =
    unsupported("KAFKA_SHARE_SPARK_UNSUPPORTED", "builtFor" -> builtFor, "found" -> found)

  val BrokerUnreachable = "KAFKA_SHARE_BROKER_UNREACHABLE"

  def brokerUnreachable(
      bootstrapServers: String,
      timeoutMs: Long,
      action: String,
      cause: Throwable
  ): KafkaShareRuntimeException = runtime(
    BrokerUnreachable,
    cause,
    "bootstrapServers" -> bootstrapServers,
    "timeoutMs" -> timeoutMs.toString,
    "action" -> action,
    "cause" -> describe(cause)
  )

  def authenticationFailed(bootstrapServers: String, action: String, cause: Throwable): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_AUTHENTICATION_FAILED",
      cause,
      "bootstrapServers" -> bootstrapServers,
      "action" -> action,
      "cause" -> describe(cause)
    )

  val NotAuthorized = "KAFKA_SHARE_NOT_AUTHORIZED"

  def notAuthorized(bootstrapServers: String, action: String, cause: Throwable): KafkaShareRuntimeException =
    runtime(
      NotAuthorized,
      cause,
      "bootstrapServers" -> bootstrapServers,
      "action" -> action,
      "cause" -> describe(cause)
    )

  /**
   * A login or ACL refusal by the cluster, as the error that says which and what the principal
   * needs; None for any other failure, which each caller reports in its own terms.
   */
  def refusal(bootstrapServers: String, action: String, cause: Throwable): Option[KafkaShareRuntimeException] =
    cause match {
      case _: AuthenticationException => Some(authenticationFailed(bootstrapServers, action, cause))
      case _: AuthorizationException => Some(notAuthorized(bootstrapServers, action, cause))
      case _ => None
    }

  def clientNotCreated(client: String, groupId: String, cause: Throwable): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_CLIENT_NOT_CREATED",
      cause,
      "client" -> client,
      "groupId" -> groupId,
      "cause" -> describe(cause)
    )

  def groupConfigFailed(groupId: String, config: String, option: String, cause: Throwable): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_GROUP_CONFIG_FAILED",
      cause,
      "groupId" -> groupId,
      "config" -> config,
      "option" -> option,
      "cause" -> describe(cause)
    )

  def deadLettersNotSent(bootstrapServers: String, action: String, cause: Throwable): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_DEAD_LETTERS_NOT_SENT",
      cause,
      "bootstrapServers" -> bootstrapServers,
      "action" -> action,
      "cause" -> describe(cause)
    )

  def checkpointNeedsReplay(checkpoint: String, strategy: String): KafkaShareRuntimeException =
    runtime("KAFKA_SHARE_CHECKPOINT_NEEDS_REPLAY", null, "checkpoint" -> checkpoint, "strategy" -> strategy)

  def checkpointNotAtomic(dir: String, why: String, strategy: String): KafkaShareRuntimeException =
    runtime("KAFKA_SHARE_CHECKPOINT_NOT_ATOMIC", null, "dir" -> dir, "why" -> why, "strategy" -> strategy)

  def realTimeUnsupported(
      option: String,
      value: String,
      reason: String,
      fix: String
  ): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_REAL_TIME_UNSUPPORTED", "option" -> option, "value" -> value, "reason" -> reason, "fix" -> fix)

  def realTimeOnly(value: String): KafkaShareIllegalArgumentException =
    invalid("KAFKA_SHARE_REAL_TIME_ONLY", "value" -> value)

  def realTimeNeedsSpark(found: String): KafkaShareUnsupportedOperationException =
    unsupported("KAFKA_SHARE_REAL_TIME_NEEDS_SPARK", "found" -> found)

  def replayRecordsGone(round: Long, records: Seq[String]): KafkaShareRuntimeException =
    runtime("KAFKA_SHARE_REPLAY_RECORDS_GONE", null, "round" -> round.toString, "records" -> records.mkString(", "))

  def batchJoinedWithItself(heldSlots: Seq[Int], wantedSlot: Int, waitedMs: Long): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_BATCH_JOINED_WITH_ITSELF",
      null,
      "heldSlots" -> heldSlots.sorted.mkString(", "),
      "wantedSlot" -> wantedSlot.toString,
      "waitedMs" -> waitedMs.toString
    )

  def shareGroupsDisabled(bootstrapServers: String, level: String): KafkaShareRuntimeException =
    runtime("KAFKA_SHARE_GROUPS_DISABLED", null, "bootstrapServers" -> bootstrapServers, "level" -> level)

  def brokerDeadLettersUnsupported(
      bootstrapServers: String,
      level: String,
      option: String
  ): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_BROKER_DLQ_UNSUPPORTED",
      null,
      "bootstrapServers" -> bootstrapServers,
      "level" -> level,
      "option" -> option
    )

  def brokerDeadLetterTopicUnusable(
      option: String,
      topic: String,
      problem: String,
      fix: String
  ): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_BROKER_DLQ_TOPIC_UNUSABLE",
      null,
      "option" -> option,
      "topic" -> topic,
      "problem" -> problem,
      "fix" -> fix
    )

  def brokerUnsupported(bootstrapServers: String, release: String, level: Int): KafkaShareRuntimeException =
    runtime(
      "KAFKA_SHARE_BROKER_UNSUPPORTED",
      null,
      "bootstrapServers" -> bootstrapServers,
      "release" -> release,
      "level" -> level.toString
    )

  private def runtime(condition: String, cause: Throwable, params: (String, String)*): KafkaShareRuntimeException = {
    val map = params.toMap
    new KafkaShareRuntimeException(condition, map, message(condition, map), cause)
  }

  /**
   * The innermost of Kafka's exceptions, which says what Kafka was doing ("Failed to load SSL keystore
   * ... of type PKCS12"), and its cause, which says why ("keystore password was incorrect"). The
   * wrappers outside it ("Failed to create new KafkaAdminClient", ExecutionException) add nothing,
   * nor do the causes further in, and neither does a wrapper whose message is only its cause's.
   * With none of Kafka's exceptions in the chain, the innermost cause. Shaded names read as Kafka's;
   * no closing period, as the messages that quote it add their own.
   */
  private def describe(t: Throwable): String = {
    val chain = Iterator.iterate(t)(_.getCause).takeWhile(_ != null).take(MaxCauses).toVector
    val kafka = chain.lastIndexWhere(_.isInstanceOf[KafkaException])
    val shown = if (kafka < 0) chain.takeRight(1) else chain.slice(kafka, kafka + 2).filterNot(onlyItsCause)
    ShadedKafkaNames.inKafkaNames(shown
      .map(e => s"${e.getClass.getSimpleName}: ${Option(e.getMessage).getOrElse("no answer")}")
      .mkString("; caused by ")).stripSuffix(".")
  }

  private val MaxCauses = 32 // a chain with a cycle ends somewhere

  private def onlyItsCause(e: Throwable): Boolean = e.getCause != null && e.getMessage == e.getCause.toString
}
