package io.github.sparkkafkashare.acknowledgements

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.ExecutionException

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.KafkaConnection
import io.github.sparkkafkashare.security.SparkKafkaToken
import org.apache.kafka.clients.producer.{KafkaProducer, ProducerConfig, ProducerRecord}
import org.apache.kafka.common.KafkaException
import org.apache.kafka.common.header.internals.RecordHeader
import org.apache.kafka.common.serialization.ByteArraySerializer
import org.apache.spark.sql.Row

/**
 * Copies poison records to a dead-letter topic from the driver, before they are rejected: they are
 * few by nature, and the copy must be durable (acks=all, flushed) before the REJECT that makes the
 * original unreachable.
 */
private[sparkkafkashare] object DeadLetters {
  val OriginHeader = "kafka-share.origin"
  val DeliveryCountHeader = "kafka-share.delivery-count"

  /**
   * `records` are rows of the source's schema (headers optional). A failure names the topic and
   * Kafka's reason, as a login or ACL refusal of the source's own clients does; the caller has then
   * marked nothing, so the records come back to the group if the batch fails.
   */
  def send(connection: KafkaConnection, topic: String, records: Seq[Row]): Unit = if (records.nonEmpty) {
    val action = s"copying ${records.size} records to the dead-letter topic '$topic'"
    try copy(connection, topic, records)
    catch {
      case e: ExecutionException => throw failure(connection, action, e.getCause)
      case e: KafkaException => throw failure(connection, action, e)
    }
  }

  private def failure(connection: KafkaConnection, action: String, e: Throwable): Throwable =
    KafkaShareErrors.refusal(connection.bootstrapServers, action, e)
      .getOrElse(KafkaShareErrors.deadLettersNotSent(connection.bootstrapServers, action, e))

  private def copy(connection: KafkaConnection, topic: String, records: Seq[Row]): Unit = {
    val known = ProducerConfig.configNames().asScala
    val settings = connection.clientSettings(known.contains)
    val config = SparkKafkaToken.withCurrentLogin(settings, connection.bootstrapServers) ++ Map(
      ProducerConfig.BOOTSTRAP_SERVERS_CONFIG -> connection.bootstrapServers,
      ProducerConfig.ACKS_CONFIG -> "all",
      ProducerConfig.CLIENT_ID_CONFIG -> s"kafka-share-dead-letters-${connection.groupId}"
    )
    val producer = new KafkaProducer[Array[Byte], Array[Byte]](
      config.asJava.asInstanceOf[java.util.Map[String, Object]],
      new ByteArraySerializer,
      new ByteArraySerializer
    )
    try {
      // Waits for the topic once, where each send would wait `max.block.ms` for a topic that does not exist.
      producer.partitionsFor(topic)
      records.map { r =>
        val origin = s"${r.getAs[String]("topic")}-${r.getAs[Int]("partition")}@${r.getAs[Long]("offset")}"
        val headers =
          (if (r.schema.fieldNames.contains("headers") && !r.isNullAt(r.fieldIndex("headers"))) {
             r.getSeq[Row](r.fieldIndex("headers")).map(h => new RecordHeader(h.getString(0), h.getAs[Array[Byte]](1)))
           } else Nil) ++ Seq(
            new RecordHeader(OriginHeader, origin.getBytes(UTF_8)),
            new RecordHeader(DeliveryCountHeader, r.getAs[Int]("deliveryCount").toString.getBytes(UTF_8))
          )
        val record = new ProducerRecord[Array[Byte], Array[Byte]](
          topic,
          null,
          r.getAs[Array[Byte]]("key"),
          r.getAs[Array[Byte]]("value"),
          headers.asJava.asInstanceOf[java.lang.Iterable[org.apache.kafka.common.header.Header]]
        )
        producer.send(record)
      }.foreach(_.get()) // every copy acknowledged by the broker before any original is rejected
    } finally producer.close()
  }
}
