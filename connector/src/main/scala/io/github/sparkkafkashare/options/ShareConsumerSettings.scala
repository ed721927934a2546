package io.github.sparkkafkashare.options

import org.apache.kafka.clients.consumer.ConsumerConfig

/** The settings of the share consumers a query runs on its executors. */
private[sparkkafkashare] object ShareConsumerSettings {
  val AcknowledgementModeConfig = "share.acknowledgement.mode"
  val AcquireModeConfig = "share.acquire.mode"
  /**
   * Kafka's default is 500. A micro-batch holds one poll per consumer (records stay held until the
   * batch commits), so 500 made batches so small that Spark's fixed cost per batch set the pace. The
   * group's lock limit per partition and the fetch sizes still bound a poll. A user's value wins.
   */
  val DefaultMaxPollRecords = 10000

  def apply(options: KafkaShareSourceOptions, parallelism: Int, runId: String): Map[String, String] = {
    // maxRecordsPerTrigger becomes a strict per-consumer cap: `record_limit` makes max.poll.records
    // a hard limit (the default acquire mode may return whole record batches beyond it).
    val perTriggerCap = options.maxRecordsPerTrigger.toSeq.flatMap { max =>
      val perConsumer = math.min(Int.MaxValue.toLong, (max + parallelism - 1) / parallelism)
      Seq(ConsumerConfig.MAX_POLL_RECORDS_CONFIG -> perConsumer.toString, AcquireModeConfig -> "record_limit")
    }
    Map(ConsumerConfig.MAX_POLL_RECORDS_CONFIG -> DefaultMaxPollRecords.toString) ++
      options.connection.kafkaParams ++ perTriggerCap ++ Map(
      ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG -> options.connection.bootstrapServers,
      ConsumerConfig.GROUP_ID_CONFIG -> options.groupId,
      // Always explicit, whatever the user-facing mode: in implicit mode the next poll would
      // ACCEPT records before Spark has committed the batch holding them.
      AcknowledgementModeConfig -> "explicit",
      ConsumerConfig.CLIENT_ID_CONFIG -> clientIdPrefix(options.groupId, runId))
  }

  /** Every consumer of a query run has a client id that starts with this; the reader appends its slot. */
  def clientIdPrefix(groupId: String, runId: String): String = s"kafka-share-$groupId-${runId.take(8)}"
}
