package io.github.sparkkafkashare.planning

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.kafka.common.TopicPartition
import org.apache.spark.sql.util.CaseInsensitiveStringMap
import org.scalatest.funsuite.AnyFunSuite

/**
 * What a run checks and sets on its share group as it starts, and how it follows the group's limits
 * and the subscribed partitions into its consumers' settings, with a scripted [[GroupAdmin]]: no broker.
 */
class GroupFollowerSuite extends AnyFunSuite {
  private val options = KafkaShareSourceOptions.parse(new CaseInsensitiveStringMap(
    Map("kafka.bootstrap.servers" -> "b:9092", "kafka.share.group.id" -> "g", "subscribe" -> "t").asJava
  ))
  private val runId = "0123456789abcdef"
  private val MaxPollRecords = ConsumerConfig.MAX_POLL_RECORDS_CONFIG

  private def admin(partitions: Int = 4, recordLocks: Int = 2000): FakeGroupAdmin = {
    val a = new FakeGroupAdmin
    a.partitionCounts = Map("t" -> partitions)
    a.configuredLimits = FakeGroupAdmin.limits(recordLocks = recordLocks)
    a
  }

  private val clock = new ManualClock

  private def follower(a: FakeGroupAdmin, parallelism: Int = 2): GroupFollower =
    new GroupFollower(a, options, parallelism, runId, clock)

  /** Makes the group's limits due for reading again: [[Backlog.PartitionsRefreshNanos]] pass. */
  private def limitsDue(): Unit = clock.advance(Backlog.PartitionsRefreshNanos)

  test("at construction it checks for share groups, then configures the group with the subscribed partitions") {
    val a = admin(partitions = 3)
    a.configuredLimits = FakeGroupAdmin.limits(recordLocks = 500, lockMs = 15000L, renew = false)
    val f = follower(a)
    assert(a.callsOf("checkShareGroupsEnabled") == 1)
    assert(a.configured.toSeq == Seq((options, (0 until 3).map(new TopicPartition("t", _)))))
    assert(f.groupLimits == a.configuredLimits, "the limits configureGroup returned")
    assert(a.callsOf("groupLimits") == 0)
  }

  test("a cluster without share groups fails construction, before the group is configured") {
    val a = admin()
    val disabled = KafkaShareErrors.shareGroupsDisabled("b:9092", "0")
    a.shareGroupsCheck = () => throw disabled
    assert(intercept[KafkaShareRuntimeException](follower(a)) eq disabled)
    assert(a.configured.isEmpty)
  }

  test("an unreachable cluster fails construction: a query's start waits through no outage") {
    val a = admin()
    a.unreachable = true
    val e = intercept[KafkaShareRuntimeException](follower(a))
    assert(e.condition == KafkaShareErrors.BrokerUnreachable)
    assert(a.configured.isEmpty)
  }

  test("the consumers read explicitly from the group, with client ids of the run") {
    val config = follower(admin()).consumerConfig
    assert(config(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG) == "b:9092")
    assert(config(ConsumerConfig.GROUP_ID_CONFIG) == "g")
    assert(config(ConsumerConfig.CLIENT_ID_CONFIG) == "kafka-share-g-01234567")
    assert(config(ShareConsumerSettings.AcknowledgementModeConfig) == "explicit")
  }

  test("consumers with partitions of their own poll the lock limit of their partitions, at least MinPollRecords") {
    // 4 partitions on 2 consumers: 2 each.
    val small = follower(admin(partitions = 4, recordLocks = 2000)).consumerConfig
    assert(small(MaxPollRecords) == ShareConsumerSettings.MinPollRecords.toString)
    assert(!small.contains(ShareConsumerSettings.AcquireModeConfig))
    val raised = follower(admin(partitions = 4, recordLocks = 8000)).consumerConfig
    assert(raised(MaxPollRecords) == "16000")
    // 5 partitions on 2 consumers: 3 for one of them.
    assert(follower(admin(partitions = 5, recordLocks = 8000)).consumerConfig(MaxPollRecords) == "24000")
  }

  test("consumers that share partitions poll at most their even share of the lock limit, strictly") {
    // 4 consumers on 2 partitions of 2000 locks each: 1000 records each.
    val config = follower(admin(partitions = 2, recordLocks = 2000), parallelism = 4).consumerConfig
    assert(config(MaxPollRecords) == "1000")
    assert(config(ShareConsumerSettings.AcquireModeConfig) == ShareConsumerSettings.StrictAcquireMode)
  }

  test("the settings stay as they are while the partition count and the lock limit do") {
    val a = admin(partitions = 4, recordLocks = 8000)
    val f = follower(a)
    val before = f.consumerConfig
    f.follow(Some(4), outageOngoing = false)
    f.follow(None, outageOngoing = false)
    assert(f.consumerConfig eq before)
    assert(a.callsOf("groupLimits") == 0, "the limits are not due yet")
  }

  test("the settings follow the partition count, and a count not known keeps the last") {
    val f = follower(admin(partitions = 4, recordLocks = 8000))
    assert(f.consumerConfig(MaxPollRecords) == "16000")
    f.follow(Some(8), outageOngoing = false)
    val grown = f.consumerConfig
    assert(grown(MaxPollRecords) == "32000")
    f.follow(None, outageOngoing = false)
    f.follow(Some(8), outageOngoing = false)
    assert(f.consumerConfig eq grown)
    f.follow(Some(1), outageOngoing = false) // a topic was recreated with fewer partitions: shared now
    assert(f.consumerConfig(MaxPollRecords) == "4000")
    assert(f.consumerConfig(ShareConsumerSettings.AcquireModeConfig) == ShareConsumerSettings.StrictAcquireMode)
  }

  test("the group's limits are not read again before they are due") {
    val a = admin()
    val f = follower(a)
    a.currentLimits = () => FakeGroupAdmin.limits(recordLocks = 8000)
    f.follow(Some(4), outageOngoing = false)
    assert(a.callsOf("groupLimits") == 0)
    assert(f.groupLimits.recordLocksPerPartition == 2000)
  }

  test("once due, the group's limits are read again, and a changed lock limit changes the settings") {
    val a = admin(partitions = 4, recordLocks = 2000)
    val f = follower(a)
    assert(f.consumerConfig(MaxPollRecords) == "10000")
    a.currentLimits = () => FakeGroupAdmin.limits(recordLocks = 8000)
    limitsDue()
    f.follow(Some(4), outageOngoing = false)
    assert(a.callsOf("groupLimits") == 1)
    assert(f.groupLimits.recordLocksPerPartition == 8000)
    assert(f.consumerConfig(MaxPollRecords) == "16000")
    f.follow(Some(4), outageOngoing = false)
    assert(a.callsOf("groupLimits") == 1, "read at most every PartitionsRefreshNanos")
  }

  test("a changed lock duration or lock renewal is followed, and leaves the settings as they are") {
    val a = admin()
    val f = follower(a)
    val before = f.consumerConfig
    a.currentLimits = () => FakeGroupAdmin.limits(lockMs = 5000L, renew = false)
    limitsDue()
    f.follow(Some(4), outageOngoing = false)
    assert(f.groupLimits == FakeGroupAdmin.limits(lockMs = 5000L, renew = false))
    assert(f.consumerConfig eq before)
  }

  test("during an outage the limits are not read, even when due, while the partition count is still followed") {
    val a = admin(partitions = 4, recordLocks = 8000)
    val f = follower(a)
    a.currentLimits = () => FakeGroupAdmin.limits(recordLocks = 2000)
    limitsDue()
    f.follow(Some(8), outageOngoing = true)
    assert(a.callsOf("groupLimits") == 0)
    assert(f.groupLimits.recordLocksPerPartition == 8000)
    assert(f.consumerConfig(MaxPollRecords) == "32000")
    // Once the cluster answers again, the limits are read at the next follow: the outage did not count as a read.
    f.follow(Some(8), outageOngoing = false)
    assert(a.callsOf("groupLimits") == 1)
    assert(f.consumerConfig(MaxPollRecords) == "10000")
  }

  test("a failed read of the limits keeps the last ones, and is tried again only when due again") {
    val a = admin(partitions = 4, recordLocks = 8000)
    val f = follower(a)
    val before = f.consumerConfig
    a.unreachable = true
    limitsDue()
    f.follow(Some(4), outageOngoing = false)
    assert(a.callsOf("groupLimits") == 1)
    assert(f.groupLimits.recordLocksPerPartition == 8000)
    assert(f.consumerConfig eq before)
    f.follow(Some(4), outageOngoing = false)
    assert(a.callsOf("groupLimits") == 1)
    a.unreachable = false
    a.currentLimits = () => FakeGroupAdmin.limits(recordLocks = 2000)
    limitsDue()
    f.follow(Some(4), outageOngoing = false)
    assert(f.groupLimits.recordLocksPerPartition == 2000)
  }
}
