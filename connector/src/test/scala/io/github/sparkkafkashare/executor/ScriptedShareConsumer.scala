package io.github.sparkkafkashare.executor

import java.time.Duration

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import org.apache.kafka.clients.consumer.{AcknowledgeType, AcknowledgementCommitCallback, ConsumerRecord}
import org.apache.kafka.common.{KafkaException, TopicIdPartition, TopicPartition, Uuid}

/**
 * A share consumer for the slot's protocol tests, scripted by the test: each poll returns the next
 * scripted answer (records, nothing, or an exception Kafka's client throws), and each commit applies
 * the marked acknowledgements and answers as scripted (applied, refused for some partitions, or no
 * answer in time). It follows Kafka's client (4.3) where the protocol depends on it: a poll's records
 * are held for acknowledgement until acknowledged and sent (by a commit, the next poll, or the
 * close), and a poll fails while one of them is not acknowledged; records acknowledged with RENEW are
 * held no more until a poll returns them again, which the poll after an applied renewal does, and
 * nothing else; the acknowledgement callback hears what each commit did.
 */
private[executor] final class ScriptedShareConsumer(callback: AcknowledgementCommitCallback)
  extends ShareConsumerClient {
  import ScriptedShareConsumer._

  private val polls = mutable.Queue.empty[Answer]
  private val commits = mutable.Queue.empty[CommitAnswer]
  private val inFlight = mutable.LinkedHashMap.empty[(String, Int, Long), ConsumerRecord[Array[Byte], Array[Byte]]]
  private val marked = mutable.LinkedHashMap.empty[(String, Int, Long), AcknowledgeType]
  private val renewing = mutable.LinkedHashMap.empty[(String, Int, Long), ConsumerRecord[Array[Byte], Array[Byte]]]
  private val renewed = mutable.LinkedHashMap.empty[(String, Int, Long), ConsumerRecord[Array[Byte], Array[Byte]]]

  /** Every acknowledgement the broker applied, in order. */
  val applied: mutable.Buffer[((String, Int, Long), AcknowledgeType)] = mutable.Buffer.empty
  val subscriptions: mutable.Buffer[Set[String]] = mutable.Buffer.empty
  var pollTimeouts: Vector[Duration] = Vector.empty
  var lockTimeoutMs: Option[Long] = None
  var closed = false

  /** Runs as each poll begins: a test can hold the poll there. */
  var onPoll: () => Unit = () => ()

  /** The next polls return these answers, in order; once they are used, polls return nothing. */
  def willPoll(answers: Answer*): Unit = polls ++= answers

  /** The next commits answer so, in order; once they are used, every commit is applied whole. */
  def willCommit(answers: CommitAnswer*): Unit = commits ++= answers

  override def subscribe(topics: Set[String]): Unit = subscriptions += topics

  override def unsubscribe(): Unit = subscriptions += Set.empty

  override def poll(timeout: Duration): Polled = {
    pollTimeouts :+= timeout
    onPoll()
    if (inFlight.keys.exists(k => !marked.contains(k))) {
      throw new IllegalStateException("All records must be acknowledged before the next poll")
    }
    if (marked.nonEmpty) commit(timeout) // a poll sends what is marked
    val records = if (renewed.nonEmpty) { val back = renewed.values.toList; renewed.clear(); back }
    else if (renewing.nonEmpty) Nil
    else polls.headOption.map(_ => polls.dequeue()) match {
      case Some(Records(rs @ _*)) => rs.toList
      case Some(Throws(e)) => throw e
      case _ => Nil
    }
    records.foreach(r => inFlight(key(r)) = r)
    Polled(
      new java.util.ArrayList(records.asJava),
      records.map(r => new TopicPartition(r.topic(), r.partition()) -> topicId(r.topic()).toString).toMap
    )
  }

  override def acknowledge(record: ConsumerRecord[Array[Byte], Array[Byte]], ackType: AcknowledgeType): Boolean =
    inFlight.contains(key(record)) && { marked(key(record)) = ackType; true }

  override def commit(timeout: Duration): Option[Map[TopicPartition, KafkaException]] = {
    val sent = marked.toList
    marked.clear()
    sent.foreach { case (k, ackType) =>
      val record = inFlight.remove(k).get
      if (ackType == AcknowledgeType.RENEW) renewing(k) = record
    }
    val answer = commits.headOption.map(_ => commits.dequeue()).getOrElse(Applied)
    val refused: Map[TopicPartition, KafkaException] = answer match {
      case Refusing(byPartition) => byPartition
      case _ => Map.empty
    }
    sent.groupBy { case ((t, p, _), _) => new TopicPartition(t, p) }.foreach { case (tp, acks) =>
      val failure = refused.get(tp)
      if (answer != NoAnswer) {
        val offsets =
          new java.util.HashSet[java.lang.Long](acks.map { case ((_, _, o), _) => java.lang.Long.valueOf(o) }.asJava)
        callback.onComplete(
          Map(new TopicIdPartition(topicId(tp.topic()), tp) -> (offsets: java.util.Set[java.lang.Long])).asJava,
          failure.orNull
        )
        acks.foreach { case (k, ackType) =>
          renewing.remove(k).foreach(r => if (failure.isEmpty) renewed(k) = r)
          if (failure.isEmpty) applied += k -> ackType
        }
      }
    }
    if (answer == NoAnswer) None
    else Some(refused.filter { case (tp, _) => sent.exists(s => s._1._1 == tp.topic() && s._1._2 == tp.partition()) })
  }

  override def acquisitionLockTimeoutMs: Option[Long] = lockTimeoutMs

  /** Sends what is marked, as Kafka's client does as it closes. */
  override def close(timeout: Duration): Unit = {
    if (marked.nonEmpty) commit(timeout)
    closed = true
  }
}

private[executor] object ScriptedShareConsumer {
  sealed trait Answer
  final case class Records(records: ConsumerRecord[Array[Byte], Array[Byte]]*) extends Answer
  final case class Throws(e: Exception) extends Answer

  sealed trait CommitAnswer
  case object Applied extends CommitAnswer
  final case class Refusing(byPartition: Map[TopicPartition, KafkaException]) extends CommitAnswer
  case object NoAnswer extends CommitAnswer

  private def key(r: ConsumerRecord[_, _]) = (r.topic(), r.partition(), r.offset())

  /** A stable id per topic name. */
  def topicId(topic: String): Uuid = new Uuid(topic.hashCode.toLong, 42L)

  /** A record of `topic`'s partition 0 at `offset`, delivered `deliveryCount` times. */
  def record(offset: Long, topic: String = "t", deliveryCount: Short = 1): ConsumerRecord[Array[Byte], Array[Byte]] = {
    val r = new ConsumerRecord[Array[Byte], Array[Byte]](topic, 0, offset, Array.emptyByteArray, s"v$offset".getBytes)
    new ConsumerRecord[Array[Byte], Array[Byte]](
      topic,
      0,
      offset,
      r.timestamp(),
      r.timestampType(),
      0,
      0,
      Array.emptyByteArray,
      s"v$offset".getBytes,
      r.headers(),
      java.util.Optional.empty[Integer](),
      java.util.Optional.of(java.lang.Short.valueOf(deliveryCount))
    )
  }
}
