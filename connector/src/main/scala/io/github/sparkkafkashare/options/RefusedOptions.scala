package io.github.sparkkafkashare.options

import io.github.sparkkafkashare.options.KafkaShareSourceOptions._

/**
 * Options a kafka-share query refuses at `load()`, each with what to use instead: Kafka client
 * settings the source owns or a share consumer rejects, and options of Spark's `kafka` source that
 * mean nothing for a share group.
 */
private[options] object RefusedOptions {

  /** Kafka client settings the source sets itself, or that a share consumer rejects, with why. */
  val kafkaConfigs: Map[String, String] = {
    val sourceOwned = Map(
      "group.id" -> s"the source sets it from option '$GroupId'.",
      "group.type" -> "the source always uses a share group.",
      "key.deserializer" -> "keys are always returned as binary; cast or decode the 'key' column.",
      "value.deserializer" -> "values are always returned as binary; cast or decode the 'value' column.",
      "share.acknowledgement.mode" ->
        s"the source acknowledges records itself after Spark commits each batch; see option '$AcknowledgmentModeOption'.",
      "client.id" -> "the source names each consumer after the group and its slot."
    )
    // Kafka's names of the share group's own configs: a client ignores them, so a query would run without.
    val groupConfig = "it is a share group config, not a client setting;"
    val onTheGroup = "set it on the group with Kafka's kafka-configs tool (--entity-type groups)."
    val groupConfigs = Map(
      "share.auto.offset.reset" -> s"$groupConfig use option '$StartingOffsetsOption'.",
      "share.record.lock.duration.ms" -> s"$groupConfig use option '$LockTimeoutMs'.",
      "errors.deadletterqueue.topic.name" -> s"$groupConfig use option '$DeadLetterTopic'.",
      "errors.deadletterqueue.copy.record.enable" -> s"$groupConfig use option '$DeadLetterCopyRecord'."
    ) ++
      Seq(
        "share.session.timeout.ms",
        "share.heartbeat.interval.ms",
        "share.delivery.count.limit",
        "share.isolation.level",
        "share.renew.acknowledge.enable",
        "share.assignor.offload.enable"
      )
        .map(_ -> s"$groupConfig $onTheGroup")
    val rejectedByShareConsumer = Seq(
      "enable.auto.commit",
      "auto.commit.interval.ms",
      "auto.offset.reset",
      "group.instance.id",
      "partition.assignment.strategy",
      "interceptor.classes",
      "group.protocol",
      "group.remote.assignor"
    )
      .map(_ -> "Kafka share consumers do not accept it (share groups manage offsets and membership on the broker).")
    val replacedByGroupConfig = Seq("isolation.level", "session.timeout.ms", "heartbeat.interval.ms")
      .map(c =>
        c -> s"Kafka share consumers do not accept it; a share group has config 'share.$c' instead: $onTheGroup"
      )
    sourceOwned ++ groupConfigs ++ rejectedByShareConsumer ++ replacedByGroupConfig
  }

  /**
   * Options of Spark's `kafka` source that have no meaning for a share group, with what to use
   * instead. Spark ignores options a source does not read, so a query moved from `kafka` to
   * `kafka-share` would otherwise run without them, unbounded batches in place of
   * `maxOffsetsPerTrigger` for one.
   */
  val sparkKafkaSourceOptions: Map[String, String] = {
    val byTimestamp = s"a share group starts every partition at one place; use '$StartingOffsetsOption' with a " +
      "duration back from now, such as 'PT1H'."
    val ending =
      "a kafka-share query reads a stream, which has no end; Trigger.AvailableNow reads what is there and stops."
    val partitions = s"each task of a batch is one of the query's share consumers; set how many with '$Parallelism'."
    val minimum =
      s"a batch takes what the consumers acquire and is not held back for more; bound it with '$MaxRecordsPerTrigger'."
    Map(
      Assign -> s"share groups assign partitions on the broker and cannot read chosen partitions; use '$Subscribe' or '$SubscribePattern'.",
      "maxOffsetsPerTrigger" -> s"a share group hands out records, not offset ranges; use '$MaxRecordsPerTrigger'.",
      "minOffsetsPerTrigger" -> minimum,
      "maxTriggerDelay" -> minimum,
      "minPartitions" -> partitions,
      "maxRecordsPerPartition" -> partitions,
      "startingOffsetsByTimestamp" -> byTimestamp,
      "startingTimestamp" -> byTimestamp,
      "startingOffsetsByTimestampStrategy" -> byTimestamp,
      "endingOffsets" -> ending,
      "endingOffsetsByTimestamp" -> ending,
      "endingTimestamp" -> ending,
      "failOnDataLoss" -> ("a share group has no such check: when retention deletes records the group has not read, " +
        "the broker moves the group past them. Remove the option."),
      "kafkaConsumer.pollTimeoutMs" -> s"use '$PollTimeoutMs'.",
      "fetchOffset.retryIntervalMs" -> (s"a failed lookup of the driver is retried at the next batch; " +
        s"'$FetchOffsetNumRetries' sets how many in a row a running query waits through."),
      "groupIdPrefix" -> s"a share group is named, not generated; use '$GroupId'."
    )
  }
}
