package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.kafka.clients.consumer.ConsumerConfig

/** The settings of the share consumers a query runs on its executors. */
private[sparkkafkashare] object ShareConsumerSettings {
  val AcknowledgementModeConfig = "share.acknowledgement.mode"
  val AcquireModeConfig = "share.acquire.mode"

  /** Makes `max.poll.records` a hard limit (the default acquire mode may return whole record batches beyond it). */
  val StrictAcquireMode = "record_limit"

  /**
   * The smallest poll size a consumer gets unless told otherwise (Kafka's default is 500). A micro-batch
   * holds one poll per consumer (records stay held until the batch commits), so 500 made batches so
   * small that Spark's fixed cost per batch set the pace.
   */
  val MinPollRecords = 10000

  /**
   * @param partitions              partitions of the subscribed topics, as the driver last counted them
   * @param recordLocksPerPartition the group's lock limit per partition
   */
  def apply(
      options: KafkaShareSourceOptions,
      parallelism: Int,
      runId: String,
      partitions: Int,
      recordLocksPerPartition: Int
  ): Map[String, String] = {
    // maxRecordsPerTrigger becomes a strict per-consumer cap; a smaller kafka.max.poll.records (a bound
    // on a poll's memory, say) still holds.
    val userPollRecords = options.connection.kafkaParams.get(ConsumerConfig.MAX_POLL_RECORDS_CONFIG).map(_.trim.toLong)
    val perTriggerCap = slotShareOfTrigger(options, parallelism).map { share =>
      (userPollRecords.toSeq :+ math.min(Int.MaxValue.toLong, share)).min
    }
    val sharedCap = sharedPartitionCap(options, parallelism, partitions, recordLocksPerPartition)
    val strictCap = (perTriggerCap orElse sharedCap).toSeq.flatMap { records =>
      Seq(ConsumerConfig.MAX_POLL_RECORDS_CONFIG -> records.toString, AcquireModeConfig -> StrictAcquireMode)
    }
    val pollRecords = unsharedPollRecords(parallelism, partitions, recordLocksPerPartition)
    Map(ConsumerConfig.MAX_POLL_RECORDS_CONFIG -> pollRecords.toString) ++
      options.connection.clientSettings() ++ strictCap ++ Map(
        ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG -> options.connection.bootstrapServers,
        ConsumerConfig.GROUP_ID_CONFIG -> options.groupId,
        // Always explicit, whatever the user-facing mode: in implicit mode the next poll would
        // ACCEPT records before Spark has committed the batch holding them.
        AcknowledgementModeConfig -> "explicit",
        ConsumerConfig.CLIENT_ID_CONFIG -> clientIdPrefix(options.groupId, runId)
      )
  }

  /** A consumer's even share of `maxRecordsPerTrigger`, if set: what one slot may read in a round. */
  def slotShareOfTrigger(options: KafkaShareSourceOptions, parallelism: Int): Option[Long] =
    options.maxRecordsPerTrigger.map(max => (max + parallelism - 1) / parallelism)

  /**
   * A consumer's poll size when it need not share partitions: as many records as the group lets it
   * hold on its even share of the partitions, so that one poll, and so one batch, can take all the
   * lock limit allows (with a raised limit, a consumer of several partitions would otherwise fill a
   * fraction of it and pay Spark's cost per batch more often). At least [[MinPollRecords]]: while
   * members join or leave, a consumer can be assigned more than its share. The fetch sizes
   * (`fetch.max.bytes`) still bound a poll's bytes.
   */
  def unsharedPollRecords(parallelism: Int, partitions: Int, recordLocksPerPartition: Int): Long = {
    val partitionsEach = (partitions + parallelism - 1) / parallelism
    math.max(MinPollRecords.toLong, recordLocksPerPartition.toLong * partitionsEach)
  }

  /**
   * With more consumers than partitions, the consumers of a partition compete for the group's lock
   * limit on it, and in Kafka's default acquire mode the first to poll takes whole record batches up
   * to that limit: one task does the batch's work while the others find nothing and wait on it. So
   * unless the user chose poll sizes, each consumer polls at most its even share of the locks,
   * strictly. None when every consumer can have partitions of its own (or no subscribed topic exists).
   *
   * @param partitions              partitions of the subscribed topics
   * @param recordLocksPerPartition the group's lock limit per partition
   */
  def sharedPartitionCap(
      options: KafkaShareSourceOptions,
      parallelism: Int,
      partitions: Int,
      recordLocksPerPartition: Int
  ): Option[Long] = {
    val userSetPollSize = options.maxRecordsPerTrigger.isDefined ||
      Seq(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, AcquireModeConfig).exists(options.connection.kafkaParams.contains)
    if (userSetPollSize || partitions == 0 || parallelism <= partitions) None
    else Some(math.max(1L, recordLocksPerPartition.toLong * partitions / parallelism))
  }

  /** Every consumer of a query run has a client id that starts with this; the reader appends its slot. */
  def clientIdPrefix(groupId: String, runId: String): String = s"kafka-share-$groupId-${runId.take(8)}"
}
