package io.github.sparkkafkashare.planning

import java.time.Duration
import java.util.UUID
import java.util.concurrent.TimeUnit.SECONDS

import scala.concurrent.duration._
import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.{LocalKafka, UsesLocalServices}
import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.kafka.clients.admin.{AlterConfigOp, ConfigEntry, ListShareGroupOffsetsSpec, NewTopic, RecordsToDelete}
import org.apache.kafka.clients.consumer.{AcknowledgeType, KafkaShareConsumer}
import org.apache.kafka.clients.producer.{KafkaProducer, ProducerRecord}
import org.apache.kafka.common.TopicPartition
import org.apache.kafka.common.config.ConfigResource
import org.apache.kafka.common.serialization.StringSerializer
import org.apache.spark.sql.util.CaseInsensitiveStringMap
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite

/**
 * How the driver starts a share group at query start, against the local broker (`make kafka-up`, or
 * KAFKA_BOOTSTRAP_SERVERS): where each share-partition starts is read back through Kafka's Admin
 * API, and what a share consumer of the group then acquires is the broker's answer.
 */
@UsesLocalServices
class ShareGroupAdminSuite extends AnyFunSuite with BeforeAndAfterAll {

  private val bootstrap = LocalKafka.bootstrap
  private lazy val admin = LocalKafka.newAdmin()

  override def afterAll(): Unit = admin.close()

  private def newId(): String = UUID.randomUUID().toString.take(8)

  /** A topic of `partitions` partitions with `perPartition` records in each. */
  private def topicWith(partitions: Int, perPartition: Int): String = {
    val topic = s"group-start-${newId()}"
    admin.createTopics(Seq(new NewTopic(topic, partitions, 1.toShort)).asJava).all().get(30, SECONDS)
    produce(topic, partitions, perPartition)
    topic
  }

  private def produce(topic: String, partitions: Int, perPartition: Int): Unit = {
    val producer = new KafkaProducer[String, String](
      Map[String, Object]("bootstrap.servers" -> bootstrap).asJava,
      new StringSerializer,
      new StringSerializer
    )
    try for (p <- 0 until partitions; i <- 0 until perPartition)
        producer.send(new ProducerRecord(topic, p, null, s"r-$i"))
    finally producer.close()
  }

  private def partitionsOf(topic: String, n: Int): Seq[TopicPartition] = (0 until n).map(new TopicPartition(topic, _))

  private def options(group: String, topics: Seq[String], extra: (String, String)*): KafkaShareSourceOptions =
    KafkaShareSourceOptions.parse(new CaseInsensitiveStringMap((Map(
      "kafka.bootstrap.servers" -> bootstrap,
      "kafka.share.group.id" -> group,
      "subscribe" -> topics.mkString(",")
    ) ++ extra).asJava))

  private def configure(options: KafkaShareSourceOptions, partitions: Seq[TopicPartition]): Unit = {
    val groupAdmin = new ShareGroupAdmin(options.connection)
    try groupAdmin.configureGroup(options, partitions)
    finally groupAdmin.close()
  }

  /** The group's share-partition start offsets, as Kafka's Admin API reports them. */
  private def startOffsets(group: String): Map[TopicPartition, Long] =
    admin.listShareGroupOffsets(Map(group -> new ListShareGroupOffsetsSpec()).asJava)
      .partitionsToOffsetInfo(group).get(30, SECONDS).asScala
      .collect { case (tp, info) if info != null => tp -> info.startOffset() }.toMap

  private def memberCount(group: String): Int =
    admin.describeShareGroups(Seq(group).asJava).describedGroups().get(group).get(30, SECONDS).members().size()

  private def shareConsumer(group: String, topics: String*): KafkaShareConsumer[Array[Byte], Array[Byte]] = {
    val consumer = LocalKafka.newShareConsumer(group)
    consumer.subscribe(topics.asJava)
    consumer
  }

  /** What `consumer` acquires (and accepts) until it has `n` records or 30 s pass, as (partition, offset). */
  private def acquire(consumer: KafkaShareConsumer[Array[Byte], Array[Byte]], n: Int): Seq[(Int, Long)] = {
    val deadline = System.nanoTime() + SECONDS.toNanos(30)
    val acquired = Seq.newBuilder[(Int, Long)]
    var count = 0
    while (count < n && System.nanoTime() < deadline) {
      consumer.poll(Duration.ofMillis(500)).forEach { r =>
        acquired += r.partition() -> r.offset()
        count += 1
        consumer.acknowledge(r, AcknowledgeType.ACCEPT)
      }
      consumer.commitSync()
    }
    acquired.result()
  }

  test("a new group's share-partitions start where startingOffsets says, before any consumer joins") {
    val topic = topicWith(partitions = 2, perPartition = 10)
    admin.deleteRecords(Map(new TopicPartition(topic, 0) -> RecordsToDelete.beforeOffset(4L)).asJava).all().get(
      30,
      SECONDS
    )
    val group = s"g-start-${newId()}"

    configure(options(group, Seq(topic), "startingOffsets" -> "earliest"), partitionsOf(topic, 2))

    assert(memberCount(group) == 0)
    assert(
      startOffsets(group) == Map(new TopicPartition(topic, 0) -> 4L, new TopicPartition(topic, 1) -> 0L),
      "each partition starts at its earliest record"
    )
    val consumer = shareConsumer(group, topic)
    val acquired =
      try acquire(consumer, 16)
      finally consumer.close()
    assert(acquired.sorted == ((4L until 10L).map(0 -> _) ++ (0L until 10L).map(1 -> _)))
  }

  test(
    "a new group that starts at latest reads the records produced after the query started, before its consumers joined"
  ) {
    val topic = topicWith(partitions = 1, perPartition = 5)
    val group = s"g-start-${newId()}"

    configure(options(group, Seq(topic)), partitionsOf(topic, 1)) // share.auto.offset.reset: Kafka's default, latest
    produce(topic, partitions = 1, perPartition = 3)

    assert(startOffsets(group) == Map(new TopicPartition(topic, 0) -> 5L))
    // Without the start at query start, Kafka would start the partition when this consumer joins: at 8, acquiring nothing.
    val consumer = shareConsumer(group, topic)
    val acquired =
      try acquire(consumer, 3)
      finally consumer.close()
    assert(acquired == Seq(0 -> 5L, 0 -> 6L, 0 -> 7L))
  }

  test(
    "a group that has read keeps its position; a partition it has no state for starts where the group's config says"
  ) {
    val (read, added) = (topicWith(partitions = 1, perPartition = 10), topicWith(partitions = 1, perPartition = 10))
    val group = s"g-start-${newId()}"
    val readPartition = new TopicPartition(read, 0)
    admin.alterShareGroupOffsets(group, Map(readPartition -> java.lang.Long.valueOf(7L)).asJava).all().get(30, SECONDS)

    // startingOffsets applies only to a new group: the new partition gets the group's share.auto.offset.reset (latest).
    configure(
      options(group, Seq(read, added), "startingOffsets" -> "earliest"),
      Seq(readPartition, new TopicPartition(added, 0))
    )

    assert(startOffsets(group) == Map(readPartition -> 7L, new TopicPartition(added, 0) -> 10L))
  }

  test("a group with a member is left to Kafka: its offsets are not altered, and the query starts") {
    val (joined, other) = (topicWith(partitions = 1, perPartition = 10), topicWith(partitions = 1, perPartition = 10))
    val group = s"g-start-${newId()}"
    configure(options(group, Seq(joined), "startingOffsets" -> "earliest"), partitionsOf(joined, 1))
    val member = shareConsumer(group, joined)
    try {
      assert(acquire(member, 10).size == 10)
      assert(memberCount(group) == 1)

      configure(options(group, Seq(other)), partitionsOf(other, 1))

      assert(startOffsets(group).keySet == Set(new TopicPartition(joined, 0)), "Kafka refused: the group has a member")
    } finally member.close()
  }

  test(
    "the group's limits are its configs: the broker's defaults, the options the query set, then what an operator set"
  ) {
    val topic = topicWith(partitions = 1, perPartition = 0)
    val group = s"g-limits-${newId()}"
    val groupAdmin = new ShareGroupAdmin(options(group, Seq(topic)).connection)
    try {
      assert(groupAdmin.groupLimits() == GroupLimits(
        renewAllowed = true,
        recordLocksPerPartition = 2000,
        lockDurationMs = 30000L,
        assignmentIntervalMs = 1000L
      ))

      val asked = options(
        group,
        Seq(topic),
        "kafka.share.lock.timeout.ms" -> "20000",
        "kafka.share.partition.max.record.locks" -> "3000",
        "kafka.share.assignment.interval.ms" -> "0"
      )
      assert(groupAdmin.configureGroup(asked, partitionsOf(topic, 1)) == GroupLimits(true, 3000, 20000L, 0L))

      val resource = new ConfigResource(ConfigResource.Type.GROUP, group)
      val operator = Seq("share.record.lock.duration.ms" -> "45000", "share.renew.acknowledge.enable" -> "false")
        .map { case (k, v) => new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET) }
      admin.incrementalAlterConfigs(Map(resource -> operator.asJavaCollection).asJava).all().get(30, SECONDS)
      // The broker takes the change from its metadata log: a describe right after the alter may show
      // the old configs for a moment, and a running query reads them again every 5 s.
      eventually(timeout(10.seconds)) {
        assert(groupAdmin.groupLimits() == GroupLimits(
          renewAllowed = false,
          recordLocksPerPartition = 3000,
          lockDurationMs = 45000L,
          assignmentIntervalMs = 0L
        ))
      }
    } finally groupAdmin.close()
  }
}
