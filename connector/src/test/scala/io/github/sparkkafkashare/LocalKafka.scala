package io.github.sparkkafkashare

import java.util.concurrent.TimeUnit.SECONDS

import scala.jdk.CollectionConverters._

import org.apache.kafka.clients.admin.{Admin, NewTopic}
import org.apache.kafka.clients.producer.{KafkaProducer, ProducerRecord}
import org.apache.kafka.common.serialization.StringSerializer

/** The local broker the suites run against (`make kafka-up`, or KAFKA_BOOTSTRAP_SERVERS). */
object LocalKafka {
  val bootstrap: String = sys.env.getOrElse("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")

  def newAdmin(): Admin = Admin.create(Map[String, Object]("bootstrap.servers" -> bootstrap).asJava)

  /** Creates `topic` with one partition holding records "r-0" to "r-(n-1)"; returns its name. */
  def oneRecordPartition(admin: Admin, topic: String, n: Int): String = {
    admin.createTopics(Seq(new NewTopic(topic, 1, 1.toShort)).asJava).all().get(30, SECONDS)
    val producer = new KafkaProducer[String, String](
      Map[String, Object]("bootstrap.servers" -> bootstrap).asJava, new StringSerializer, new StringSerializer)
    try (0 until n).foreach(i => producer.send(new ProducerRecord(topic, s"r-$i"))) finally producer.close()
    topic
  }
}
