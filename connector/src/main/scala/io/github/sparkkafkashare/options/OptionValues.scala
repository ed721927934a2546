package io.github.sparkkafkashare.options

import java.util.regex.Pattern

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
 * The broker's dead-letter queue (Kafka 4.4, KIP-1191), set on the share group as the query starts:
 * the group configs `errors.deadletterqueue.topic.name` and, when given,
 * `errors.deadletterqueue.copy.record.enable`. The broker then writes each record the group REJECTs,
 * or that runs past the delivery-count limit, to `topic`, with headers of where it came from.
 */
private[sparkkafkashare] final case class BrokerDeadLetters(topic: String, copyRecord: Option[Boolean])
