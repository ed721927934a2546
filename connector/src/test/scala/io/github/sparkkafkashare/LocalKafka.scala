package io.github.sparkkafkashare

import java.util.concurrent.TimeUnit.SECONDS

import scala.jdk.CollectionConverters._

import org.apache.kafka.clients.admin.{Admin, AlterConfigOp, ConfigEntry, ListShareGroupOffsetsSpec, NewTopic}
import org.apache.kafka.clients.consumer.KafkaShareConsumer
import org.apache.kafka.clients.producer.{KafkaProducer, ProducerRecord}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.config.ConfigResource
import org.apache.kafka.common.serialization.{ByteArrayDeserializer, StringSerializer}

/** The local broker the suites run against (`make kafka-up`, or KAFKA_BOOTSTRAP_SERVERS). */
object LocalKafka {
  val bootstrap: String = sys.env.getOrElse("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")

  def newAdmin(): Admin = Admin.create(Map[String, Object]("bootstrap.servers" -> bootstrap).asJava)

  /** A share consumer of `group` in explicit acknowledgement mode, with `settings` added: another member, as a test plays it. */
  def newShareConsumer(group: String, settings: (String, String)*): KafkaShareConsumer[Array[Byte], Array[Byte]] =
    new KafkaShareConsumer(
      (Map[String, Object](
        "bootstrap.servers" -> bootstrap,
        "group.id" -> group,
        "share.acknowledgement.mode" -> "explicit"
      ) ++
        settings).asJava,
      new ByteArrayDeserializer,
      new ByteArrayDeserializer
    )

  /** Creates `topic` with one partition holding records "r-0" to "r-(n-1)"; returns its name. */
  def oneRecordPartition(admin: Admin, topic: String, n: Int): String = {
    admin.createTopics(Seq(new NewTopic(topic, 1, 1.toShort)).asJava).all().get(30, SECONDS)
    produce(topic, (0 until n).map(i => s"r-$i"))
    topic
  }

  /**
   * Sends `values` to `partition` of `topic`; with `oneBatch`, in one record batch (sent as the producer
   * closes), which one fetch acquires whole; with `timestamp`, each record carries the timestamp it gives.
   */
  def produce(
      topic: String,
      values: Seq[String],
      oneBatch: Boolean = false,
      timestamp: Int => Option[Long] = _ => None,
      partition: Int = 0
  ): Unit = {
    val linger = if (oneBatch) "60000" else "5"
    val producer = new KafkaProducer[String, String](
      Map[String, Object]("bootstrap.servers" -> bootstrap, "linger.ms" -> linger).asJava,
      new StringSerializer,
      new StringSerializer
    )
    try values.zipWithIndex.foreach { case (value, i) =>
        producer.send(new ProducerRecord[String, String](
          topic,
          partition,
          timestamp(i).map(Long.box).orNull,
          null,
          value
        ))
      }
    finally producer.close()
  }

  /** Deletes `topic`, and waits until the cluster no longer lists it (deletion completes on the controller first). */
  def deleteTopic(admin: Admin, topic: String): Unit = {
    admin.deleteTopics(Seq(topic).asJava).all().get(30, SECONDS)
    val deadline = System.nanoTime() + SECONDS.toNanos(30)
    while (admin.listTopics().names().get(30, SECONDS).contains(topic) && System.nanoTime() < deadline)
      Thread.sleep(100)
  }

  /** The id of `topic`, as the cluster describes it. */
  def topicId(admin: Admin, topic: String): String =
    admin.describeTopics(Seq(topic).asJava).topicNameValues().get(topic).get(30, SECONDS).topicId().toString

  /**
   * Stops the local broker's process (SIGSTOP) for `pause`, then lets it go on (SIGCONT): a broker
   * that stops answering, as in a long GC pause or a network partition, and comes back.
   */
  def pauseBroker(pause: java.time.Duration): Unit = {
    val pid = new String(java.nio.file.Files.readAllBytes(java.nio.file.Path.of(
      sys.env("KAFKA_LOCAL_STATE"),
      "broker.pid"
    ))).trim
    def signal(name: String) = assert(new ProcessBuilder("kill", s"-$name", pid).inheritIO().start().waitFor() == 0)
    signal("STOP")
    try Thread.sleep(pause.toMillis)
    finally signal("CONT")
  }

  /** Sets share-group configs of `group` (it need not exist yet). */
  def setGroupConfigs(admin: Admin, group: String, configs: (String, String)*): Unit = {
    val ops = configs.map { case (name, value) =>
      new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET)
    }
    val resource = new ConfigResource(ConfigResource.Type.GROUP, group)
    admin.incrementalAlterConfigs(Map(resource -> ops.asJavaCollection).asJava).all().get(30, SECONDS)
  }

  /** Kafka's lag of the group's share-partition 0 of `topic` (records not yet acknowledged), if it reports one. */
  def lag(admin: Admin, group: String, topic: String): Option[Long] =
    admin.listShareGroupOffsets(Map(group -> new ListShareGroupOffsetsSpec()).asJava).partitionsToOffsetInfo(group)
      .get(30, SECONDS).asScala.get(new TopicPartition(topic, 0)).flatMap(info => Option(info).map(_.lag()))
      .flatMap(l => if (l.isPresent) Some(l.get.longValue) else None)
}
