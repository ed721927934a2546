package io.github.sparkkafkashare.executor

import java.time.Duration
import java.util.concurrent.TimeUnit.MILLISECONDS

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{LoggedRecord, RecordCoordinates}
import io.github.sparkkafkashare.clients.ClientTopicIds
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.metrics.TaskCounts
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import io.github.sparkkafkashare.security.SparkKafkaToken
import org.apache.kafka.clients.consumer.{ConsumerConfig, ConsumerRecord, KafkaConsumer}
import org.apache.kafka.common.{KafkaException, TopicPartition}
import org.apache.kafka.common.errors.TimeoutException
import org.apache.kafka.common.serialization.ByteArrayDeserializer
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader

/**
 * Returns a slot's logged records of a round again, read back by their coordinates with a plain
 * consumer (no group, nothing committed): for `two-phase-commit`, a batch that a previous run of
 * the query logged but never committed; for both logging strategies, a batch evaluated again away
 * from the consumer that acquired its records, or by a consumer that holds other records than the
 * first evaluation logged. `counts` is the task's. The share group still holds or redelivers those
 * records; the slots drop their redeliveries as duplicates.
 */
private[sparkkafkashare] final class KafkaShareReplayReader(
    round: Long,
    slot: Int,
    records: Seq[LoggedRecord],
    consumerConfig: Map[String, String],
    includeHeaders: Boolean,
    counts: TaskCounts
) extends PartitionReader[InternalRow] {

  private val rows: Iterator[InternalRow] = {
    val wanted = records.map(_.coordinates)
    val found =
      if (records.isEmpty) Map.empty[RecordCoordinates, ConsumerRecord[Array[Byte], Array[Byte]]] else readBack(records)
    val missing = wanted.filterNot(found.contains)
    if (missing.nonEmpty) {
      throw KafkaShareErrors.replayRecordsGone(
        round,
        missing.sortBy(c => (c.topic, c.partition, c.offset))
          .take(5).map(c => s"${c.topic}-${c.partition}@${c.offset}")
      )
    }
    counts.add(_.replayed, found.size)
    records.iterator.map(r => KafkaShareRows.toRow(found(r.coordinates), includeHeaders, r.deliveryCount))
  }

  /**
   * The logged records still there, by coordinates. A topic made again under its name reuses the old
   * one's offsets, so records are read only from topics whose id, as the consumer knew it once it
   * had read them, is the logged one: ids never come back, so the records read came from that topic.
   */
  private def readBack(logged: Seq[LoggedRecord]): Map[RecordCoordinates, ConsumerRecord[Array[Byte], Array[Byte]]] = {
    val wanted = logged.map(_.coordinates).toSet
    val consumer = newConsumer()
    try {
      val timeout = Duration.ofMillis(timeoutMs)
      val byPartition = wanted.groupBy(c => new TopicPartition(c.topic, c.partition))
      // A partition that is no longer there (its topic deleted) has none of its records left.
      val stillThere = byPartition.keySet.map(_.topic).flatMap { topic =>
        consumer.partitionsFor(topic, timeout).asScala.map(p => new TopicPartition(topic, p.partition))
      }
      val partitions = byPartition.keySet.intersect(stillThere)
      consumer.assign(partitions.asJava)
      partitions.foreach(tp => consumer.seek(tp, byPartition(tp).map(_.offset).min))
      // Each partition is read up to its last wanted offset, or to its log's end where that comes first
      // (the topic made again, or an unclean leader election cut the log). A wanted offset that retention
      // removed resets the position to the log's start (earliest), and the records still there are read.
      val ends = consumer.endOffsets(partitions.asJava, timeout).asScala
      val readUntil = partitions.map(tp => tp -> math.min(byPartition(tp).map(_.offset).max + 1, ends(tp).longValue))
      val found = scala.collection.mutable.Map.empty[RecordCoordinates, ConsumerRecord[Array[Byte], Array[Byte]]]
      def done = readUntil.forall { case (tp, until) => consumer.position(tp, timeout) >= until }
      val timeoutNanos = MILLISECONDS.toNanos(timeoutMs)
      var lastAnswer = System.nanoTime()
      while (!done) {
        if (System.nanoTime() - lastAnswer > timeoutNanos) {
          throw new TimeoutException(s"no records came for $timeoutMs ms")
        }
        val polled = consumer.poll(Duration.ofMillis(200))
        if (!polled.isEmpty) lastAnswer = System.nanoTime()
        polled.forEach { r =>
          val c = RecordCoordinates.of(r)
          if (wanted.contains(c)) found(c) = r
        }
      }
      val ids = ClientTopicIds.known(consumer)
      val madeAgain = logged.collect { case LoggedRecord(c, _, Some(id)) if !ids.get(c.topic).contains(id) => c }.toSet
      found.toMap -- madeAgain
    } catch {
      case e: TimeoutException => throw unreachable(e)
      case e: KafkaException => throw KafkaShareErrors.refusal(bootstrapServers, action, e).getOrElse(e)
    } finally consumer.close()
  }

  private def newConsumer(): KafkaConsumer[Array[Byte], Array[Byte]] = {
    val known = ConsumerConfig.configNames().asScala
    val settings = consumerConfig.filter { case (k, _) => known.contains(k) }
    val config = SparkKafkaToken.withCurrentLogin(settings, bootstrapServers) -- Seq(
      ConsumerConfig.GROUP_ID_CONFIG,
      "share.acknowledgement.mode",
      "share.acquire.mode"
    ) ++ Map(
      ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG -> "false",
      ConsumerConfig.AUTO_OFFSET_RESET_CONFIG -> "earliest",
      // Asking for a deleted topic must not make it again on a cluster that creates topics on first use.
      ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG -> "false",
      ConsumerConfig.CLIENT_ID_CONFIG -> s"${consumerConfig(ConsumerConfig.CLIENT_ID_CONFIG)}-replay-$slot"
    )
    ExecutorKafkaClients.create(s"replay consumer of slot $slot", consumerConfig(ConsumerConfig.GROUP_ID_CONFIG)) {
      new KafkaConsumer[Array[Byte], Array[Byte]](
        config.asJava.asInstanceOf[java.util.Map[String, Object]],
        new ByteArrayDeserializer,
        new ByteArrayDeserializer
      )
    }
  }

  private def bootstrapServers = consumerConfig(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG)

  private def action = s"reading back ${records.size} records of slot $slot to re-run the batch of round $round"

  /** The bound on a wait for the cluster, as for every other call the source makes to it. */
  private def timeoutMs: Long = KafkaShareSourceOptions.apiTimeoutMs(consumerConfig)

  private def unreachable(cause: Throwable) =
    KafkaShareErrors.brokerUnreachable(bootstrapServers, timeoutMs, action, cause)

  private var current: InternalRow = _

  override def next(): Boolean = rows.hasNext && { current = rows.next(); true }

  override def get(): InternalRow = current

  override def currentMetricsValues(): Array[CustomTaskMetric] = counts.values

  override def close(): Unit = ()
}
