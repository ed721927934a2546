package io.github.sparkkafkashare.planning

import java.util.Locale
import java.util.concurrent.{ExecutionException, TimeUnit, TimeoutException}
import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.{KafkaShareErrors, KafkaShareRuntimeException}
import io.github.sparkkafkashare.executor.GroupLimits
import io.github.sparkkafkashare.options.{KafkaConnection, KafkaShareSourceOptions, Subscription}
import io.github.sparkkafkashare.security.SparkKafkaToken
import org.apache.kafka.clients.admin.{Admin, AdminClientConfig, AlterConfigOp, ConfigEntry, ListShareGroupOffsetsSpec, OffsetSpec, ShareGroupDescription, SharePartitionOffsetInfo, TopicDescription}
import org.apache.kafka.common.{KafkaException, KafkaFuture, TopicCollection, TopicPartition, Uuid}
import org.apache.kafka.common.config.ConfigResource
import org.apache.kafka.common.errors.{GroupIdNotFoundException, RetriableException, UnknownTopicIdException, UnknownTopicOrPartitionException}
import org.apache.spark.internal.Logging

/**
 * The driver's view of the share group, through Kafka's Admin API: group configs the options ask
 * for, the topics a pattern matches, and the backlog that tells the stream whether to run a batch.
 * Every call is bounded by `kafka.default.api.timeout.ms`, so an unreachable cluster fails the
 * call with a clear error instead of hanging it ([[OutageTolerance]] decides whether the query fails).
 */
private[sparkkafkashare] final class ShareGroupAdmin(connection: KafkaConnection) extends GroupAdmin with AutoCloseable
  with Logging {
  import ShareGroupAdmin._
  import ShareGroupConfigs._

  // The client and the Spark delegation token it logs in with; replaced when Spark obtains a new token.
  @volatile private var client: (Option[SparkKafkaToken], Admin) = {
    val token = SparkKafkaToken.current(connection.bootstrapServers)
    (token, newAdmin(token))
  }

  private def newAdmin(token: Option[SparkKafkaToken]): Admin =
    try Admin.create(adminConfig(connection, token))
    catch {
      // Kafka says only "Failed to create new KafkaAdminClient"; the cause (a login module, say) is what helps.
      case e: KafkaException => throw KafkaShareErrors.clientNotCreated("Admin client", connection.groupId, e)
    }

  /** The Admin client, created anew with the token Spark holds now if it is not the one in use. */
  private def admin: Admin = synchronized {
    val token = SparkKafkaToken.current(connection.bootstrapServers)
    if (token != client._1) {
      logInfo(
        s"Creating a new Admin client: the Spark delegation token for Kafka changed to ${token.getOrElse("none")}."
      )
      val old = client._2
      client = (token, newAdmin(token))
      old.close(java.time.Duration.ofSeconds(5))
    }
    client._2
  }
  private val group = connection.groupId
  private val answered = new AtomicLong()
  private val waitedNanos = new AtomicLong()

  /** Calls the cluster has answered so far: whether a lookup reached it, even one that needed no call. */
  override def callsAnswered: Long = answered.get()

  /** How long the driver has waited for this client's calls so far, in ms. */
  def waitedMs: Long = TimeUnit.NANOSECONDS.toMillis(waitedNanos.get())

  /**
   * Fails unless the cluster answers, has share groups enabled, and runs at Kafka 4.2 or later: a 4.1
   * broker (share groups in preview) refuses fetches in `share.acquire.mode=record_limit` and has no
   * RENEW, so the source would read nothing, or lose the locks of a batch longer than the lock. The
   * release is the cluster's finalized metadata.version, which every broker shares: a cluster can
   * finalize 4.2's only once all its brokers run 4.2 or later, while the answering broker alone may
   * support newer levels in the middle of a rolling upgrade. With `brokerDeadLetters` (option
   * `kafka.share.dead.letter.topic`), it also fails unless the cluster has Kafka 4.4's dead-letter
   * queues on (share.version 2): an older cluster would refuse the group config, or take it and
   * write nothing.
   */
  override def checkShareGroupsEnabled(brokerDeadLetters: Boolean): Unit = {
    val features = await("checking that share groups are enabled", admin.describeFeatures().featureMetadata())
    def finalized(feature: String) =
      Option(features.finalizedFeatures().get(feature)).map(_.maxVersionLevel().toInt).getOrElse(0)
    val level = finalized("share.version")
    if (level < 1) throw KafkaShareErrors.shareGroupsDisabled(connection.bootstrapServers, level.toString)
    Some(finalized("metadata.version")).filter(_ < MetadataVersionOf42).foreach { v =>
      throw KafkaShareErrors.brokerUnsupported(connection.bootstrapServers, releaseOf(v), v)
    }
    if (brokerDeadLetters && level < ShareVersionOfDeadLetters) {
      throw KafkaShareErrors.brokerDeadLettersUnsupported(
        connection.bootstrapServers,
        level.toString,
        KafkaShareSourceOptions.DeadLetterTopic
      )
    }
  }

  /**
   * Applies the group configs that options translate to: `kafka.share.lock.timeout.ms`,
   * `kafka.share.partition.max.record.locks` and `kafka.share.assignment.interval.ms` always, and
   * `startingOffsets` only to a group that has not started reading yet (Kafka applies
   * `share.auto.offset.reset` only when a share-partition is first initialized), and the broker's
   * dead-letter topic of `kafka.share.dead.letter.topic` once [[checkDeadLetterTopic]] finds the
   * broker can write it. Then starts the share-partitions of `partitions` the group has no state
   * for ([[startNewPartitions]]). Returns
   * the limits that shape the query's rounds: the group's, with the values the options just set
   * (not read back: another broker may not have the change yet).
   */
  override def configureGroup(options: KafkaShareSourceOptions, partitions: Seq[TopicPartition]): GroupLimits = {
    val states = partitionStates()
    val configs = groupConfigs()
    val lock = options.lockTimeoutMs.map(ms =>
      (KafkaShareSourceOptions.LockTimeoutMs, new ConfigEntry(LockDurationConfig, ms.toString))
    )
    val recordLocks = options.partitionMaxRecordLocks.map(n =>
      (KafkaShareSourceOptions.PartitionMaxRecordLocks, new ConfigEntry(RecordLocksConfig, n.toString))
    )
    val assignmentInterval = options.assignmentIntervalMs.map(ms =>
      (KafkaShareSourceOptions.AssignmentIntervalMs, new ConfigEntry(AssignmentIntervalConfig, ms.toString))
    )
    val reset = options.startingOffsets.flatMap { starting =>
      if (states.isEmpty) {
        Some((
          KafkaShareSourceOptions.StartingOffsetsOption,
          new ConfigEntry(AutoOffsetResetConfig, starting.groupConfigValue)
        ))
      } else {
        logWarning(s"Share group '$group' has already started reading, so it keeps its position; " +
          s"option '${KafkaShareSourceOptions.StartingOffsetsOption}' applies only to a new group.")
        None
      }
    }
    options.brokerDeadLetters.foreach(d => checkDeadLetterTopic(d.topic))
    val deadLetters = options.brokerDeadLetters.toSeq.flatMap { d =>
      (KafkaShareSourceOptions.DeadLetterTopic, new ConfigEntry(DeadLetterTopicConfig, d.topic)) +:
        d.copyRecord.toSeq.map(copy =>
          (KafkaShareSourceOptions.DeadLetterCopyRecord, new ConfigEntry(DeadLetterCopyRecordConfig, copy.toString))
        )
    }
    val resource = new ConfigResource(ConfigResource.Type.GROUP, group)
    (lock ++ recordLocks ++ assignmentInterval ++ reset ++ deadLetters).foreach { case (option, entry) =>
      val op = new AlterConfigOp(entry, AlterConfigOp.OpType.SET)
      try {
        await(
          s"setting ${entry.name()} of share group '$group' for option '$option'",
          admin.incrementalAlterConfigs(Map(resource -> (Seq(op).asJavaCollection)).asJava).all()
        )
      } catch {
        case e: ExecutionException =>
          throw KafkaShareErrors.groupConfigFailed(group, s"${entry.name()}=${entry.value()}", option, e)
      }
      logInfo(s"Set ${entry.name()}=${entry.value()} on share group '$group' (option '$option')")
    }
    val resetInEffect = reset.map(_._2.value()).orElse(configs.get(AutoOffsetResetConfig))
    startNewPartitions(partitions.filterNot(states.contains), resetInEffect)
    val current = limitsIn(configs)
    current.copy(
      recordLocksPerPartition = options.partitionMaxRecordLocks.getOrElse(current.recordLocksPerPartition),
      lockDurationMs = options.lockTimeoutMs.getOrElse(current.lockDurationMs),
      assignmentIntervalMs = options.assignmentIntervalMs.fold(current.assignmentIntervalMs)(_.toLong)
    )
  }

  /**
   * Fails unless the broker can write dead letters to `topic`. Kafka 4.4 checks the topic only as it
   * writes, and archives the record if it cannot: a name without the cluster's prefix, a topic that
   * does not exist (unless the cluster creates it), or one without
   * `errors.deadletterqueue.group.enable=true`. The checks need DESCRIBE_CONFIGS on the cluster and
   * on the topic; one refused is logged and skipped, as the source needs neither to run.
   */
  private def checkDeadLetterTopic(topic: String): Unit = {
    val servers = connection.bootstrapServers
    def unusable(problem: String, fix: String) =
      KafkaShareErrors.brokerDeadLetterTopicUnusable(KafkaShareSourceOptions.DeadLetterTopic, topic, problem, fix)
    val broker = brokerDeadLetterConfigs()
    val prefix = broker.map(_._1).getOrElse(DefaultDeadLetterTopicPrefix)
    if (broker.isDefined && !topic.startsWith(prefix)) {
      throw unusable(
        s"does not start with '$prefix', the prefix the cluster requires (broker config $DeadLetterTopicPrefixConfig)",
        s"Name a topic that starts with '$prefix'."
      )
    }
    val resource = new ConfigResource(ConfigResource.Type.TOPIC, topic)
    val described =
      try Some(await(
          s"reading the configs of dead-letter topic '$topic'",
          admin.describeConfigs(Seq(resource).asJava).all()
        ))
      catch {
        case _: UnknownTopicOrPartitionException => None
        case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.NotAuthorized =>
          logWarning(s"Not checking that the broker can write dead letters to topic '$topic': ${e.getMessage}")
          return
      }
    described.flatMap(c => Option(c.get(resource))) match {
      case None if broker.exists(_._2) =>
        logInfo(s"Dead-letter topic '$topic' does not exist yet; the cluster creates it ($DeadLetterAutoCreateConfig)")
      case None =>
        throw unusable(
          "does not exist, and the cluster does not create it",
          s"Create it: kafka-topics.sh --bootstrap-server $servers --create --topic $topic " +
            s"--config $DeadLetterTopicEnableConfig=true (or set broker config $DeadLetterAutoCreateConfig=true)."
        )
      case Some(config)
          if !Option(config.get(DeadLetterTopicEnableConfig)).exists(e => "true".equalsIgnoreCase(e.value())) =>
        throw unusable(
          s"does not let share groups write to it (topic config $DeadLetterTopicEnableConfig is not true)",
          s"Allow it: kafka-configs.sh --bootstrap-server $servers --alter --entity-type topics --entity-name $topic " +
            s"--add-config $DeadLetterTopicEnableConfig=true."
        )
      case Some(_) =>
    }
    if (broker.isEmpty && !topic.startsWith(DefaultDeadLetterTopicPrefix)) {
      logWarning(
        s"Dead-letter topic '$topic' does not start with Kafka's default prefix '$DefaultDeadLetterTopicPrefix'; " +
          s"the broker writes to it only if the cluster's $DeadLetterTopicPrefixConfig allows it."
      )
    }
  }

  /** The cluster's dead-letter prefix and auto-creation, as a broker describes them; None if refused. */
  private def brokerDeadLetterConfigs(): Option[(String, Boolean)] =
    try {
      val nodes = await("describing the cluster", admin.describeCluster().nodes()).asScala
      nodes.headOption.map { node =>
        val resource = new ConfigResource(ConfigResource.Type.BROKER, node.idString())
        val configs = await(
          s"reading the dead-letter configs of broker ${node.idString()}",
          admin.describeConfigs(Seq(resource).asJava).all()
        ).get(resource)
        def value(name: String) = Option(configs).flatMap(c => Option(c.get(name))).flatMap(e => Option(e.value()))
        (
          value(DeadLetterTopicPrefixConfig).getOrElse(DefaultDeadLetterTopicPrefix),
          value(DeadLetterAutoCreateConfig).exists(_.equalsIgnoreCase("true"))
        )
      }
    } catch {
      case e: KafkaShareRuntimeException if e.condition == KafkaShareErrors.NotAuthorized =>
        logWarning(s"Not checking the cluster's dead-letter topic prefix: ${e.getMessage}")
        None
    }

  /** The group's limits as its configs say now (changed with `kafka-configs`, say). */
  override def groupLimits(): GroupLimits = limitsIn(groupConfigs())

  /**
   * Gives each share-partition the group has no state for its start offset now, where
   * `share.auto.offset.reset` says (`earliest` or `latest`, as Kafka reads them), before any consumer
   * of the query joins. Kafka would initialize them itself once a member joins, but only a few
   * seconds later, answering the member's first heartbeats with no partitions meanwhile: a new
   * group's first records came about 6 s after its consumer started, and under 1 s when the group's
   * offsets had been set first (Kafka 4.3.1; docs/benchmarks.md, "Joining the group").
   * Kafka alters a group's offsets only while the group has no members, so a member that joins
   * meanwhile cannot have its position moved. Anything Kafka refuses, and a `by_duration` reset, is
   * left to Kafka's own initialization.
   */
  private def startNewPartitions(partitions: Seq[TopicPartition], groupReset: Option[String]): Unit = {
    if (partitions.isEmpty) return
    val reset = groupReset.getOrElse(DefaultAutoOffsetReset).toLowerCase(Locale.ROOT)
    val spec = reset match {
      case "earliest" => OffsetSpec.earliest()
      case "latest" => OffsetSpec.latest()
      case _ => return
    }
    try {
      val starts = offsets(partitions.toSet, spec)
      if (starts.isEmpty) return // their topics are gone
      await(
        s"starting share group '$group' at $reset",
        admin.alterShareGroupOffsets(group, starts.map { case (tp, o) => tp -> java.lang.Long.valueOf(o) }.asJava).all()
      )
      logInfo(
        s"Share group '$group' starts ${starts.size} partitions at $reset: ${starts.toSeq.sortBy(_._1.toString).mkString(", ")}"
      )
    } catch {
      case e: ExecutionException => leftToKafka(e.getCause.getMessage)
      // The first such call in a cluster creates Kafka's share-group state topic, which can take
      // longer than a short `kafka.default.api.timeout.ms`; Kafka completes the call regardless.
      // The ACLs the source needs (KAFKA_SHARE_NOT_AUTHORIZED) need not allow this call either.
      case e: KafkaShareRuntimeException if LeftToKafka.contains(e.condition) => leftToKafka(e.getMessage)
    }
  }

  private val LeftToKafka = Set(KafkaShareErrors.BrokerUnreachable, KafkaShareErrors.NotAuthorized)

  private def leftToKafka(reason: String): Unit =
    logInfo(
      s"Kafka initializes share group '$group' when its consumers join (the start offsets were not set now: $reason)"
    )

  private def groupConfigs(): Map[String, String] = {
    val resource = new ConfigResource(ConfigResource.Type.GROUP, group)
    val configs =
      await(s"reading the configs of share group '$group'", admin.describeConfigs(Seq(resource).asJava).all())
    Option(configs.get(resource)).toSeq.flatMap(_.entries().asScala).collect {
      case e if e.value() != null => e.name() -> e.value()
    }.toMap
  }

  /** The topics the subscription names that exist now (a pattern is matched against the cluster's topics). */
  override def subscribedTopics(subscription: Subscription): Set[String] = subscription match {
    case Subscription.Topics(topics) => topics.toSet
    case p: Subscription.TopicPattern =>
      await("listing topics", admin.listTopics().names()).asScala.filter(t => p.pattern.matcher(t).matches()).toSet
  }

  /** The group's state per share-partition; empty for a group that has not started reading. */
  def partitionStates(): Map[TopicPartition, SharePartitionOffsetInfo] = {
    val spec = Map(group -> new ListShareGroupOffsetsSpec()).asJava
    try {
      await("reading share group offsets", admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(group))
        .asScala.collect { case (tp, info) if info != null => tp -> info }.toMap
    } catch {
      case e: ExecutionException if e.getCause.isInstanceOf[GroupIdNotFoundException] => Map.empty
    }
  }

  /**
   * Per partition: the records the group has yet to finish (available, or acquired and not yet
   * acknowledged), or None where Kafka cannot say (a share-partition it has not persisted).
   */
  override def lags(partitions: Set[TopicPartition]): Map[TopicPartition, Option[Long]] = {
    if (partitions.isEmpty) return Map.empty
    val states = partitionStates()
    partitions.map(tp => tp -> states.get(tp).flatMap(lagOf)).toMap
  }

  /** The partitions of `topics`; a topic that does not exist (yet) has none (a share consumer waits for it). */
  override def partitionsOf(topics: Set[String]): Seq[TopicPartition] =
    describeTopics(topics).flatMap(ShareGroupAdmin.partitionsOf)

  /** Those of `topics` that exist, as Kafka describes them (partitions, id). */
  def describeTopics(topics: Set[String]): Seq[TopicDescription] =
    if (topics.isEmpty) Seq.empty
    else admin.describeTopics(topics.asJavaCollection).topicNameValues().asScala.toSeq.flatMap {
      case (topic, future) => awaitIfExists(s"describing topic '$topic'", future)
    }

  /**
   * Of `logged` topics (name and id), those that are gone: the cluster knows no topic of that id, and
   * the name names another topic now, or none. Asked by id, a broker that has yet to learn that a
   * topic was deleted still knows it, so a topic is never taken as gone early.
   */
  def topicsGone(logged: Set[(String, String)]): Set[(String, String)] = {
    if (logged.isEmpty) return Set.empty
    val byId =
      admin.describeTopics(TopicCollection.ofTopicIds(logged.map(t => Uuid.fromString(t._2)).asJava)).topicIdValues()
    // Not await: Kafka takes an unknown id for metadata not yet propagated (retriable), not for an outage.
    val unknown = logged.filter { case (_, id) =>
      try { byId.get(Uuid.fromString(id)).get(connection.apiTimeoutMs, TimeUnit.MILLISECONDS); false }
      catch {
        case e: ExecutionException if e.getCause.isInstanceOf[UnknownTopicIdException] => true
      }
    }
    val now = describeTopics(unknown.map(_._1)).map(d => d.name() -> d.topicId().toString).toMap
    unknown.filterNot { case (topic, id) => now.get(topic).contains(id) }
  }

  /** The log end offset of each partition. */
  override def endOffsets(partitions: Set[TopicPartition]): Map[TopicPartition, Long] =
    offsets(partitions, OffsetSpec.latest())

  /** The offset `spec` gives for each partition that exists. */
  private def offsets(partitions: Set[TopicPartition], spec: OffsetSpec): Map[TopicPartition, Long] = {
    if (partitions.isEmpty) return Map.empty
    val listed = admin.listOffsets(partitions.map(tp => tp -> spec).toMap.asJava)
    partitions.flatMap(tp => awaitIfExists(s"listing offsets of $tp", listed.partitionResult(tp)).map(tp -> _.offset())).toMap
  }

  /**
   * Partitions assigned to members whose client id starts with `clientIdPrefix`, counting only
   * members that have caught up with the group's target assignment (their member epoch has reached
   * it), so they are fetching those partitions rather than about to.
   */
  override def assignedPartitions(clientIdPrefix: String): Set[TopicPartition] = {
    describeGroup().toSeq.flatMap { described =>
      described.members().asScala
        .filter(m => m.clientId().startsWith(clientIdPrefix) && m.memberEpoch() >= described.targetAssignmentEpoch())
        .flatMap(_.assignment().topicPartitions().asScala)
    }.toSet
  }

  /** The group's state, members and per-partition progress, for monitoring; None if the group does not exist. */
  def describe(): Option[ShareGroupState] = {
    describeGroup().map { d =>
      val members = d.members().asScala.toSeq.map { m =>
        ShareGroupMember(
          m.consumerId(),
          m.clientId(),
          m.host(),
          m.assignment().topicPartitions().asScala.toSeq.map(tp => (tp.topic(), tp.partition())).sorted
        )
      }
      val partitions = partitionStates().toSeq.map { case (tp, info) =>
        SharePartitionState(tp.topic(), tp.partition(), info.startOffset(), lagOf(info))
      }.sortBy(p => (p.topic, p.partition))
      ShareGroupState(group, d.groupState().toString, members, partitions)
    }
  }

  /** The group as Kafka describes it; None if it does not exist. */
  private def describeGroup(): Option[ShareGroupDescription] =
    try {
      Some(await(
        s"describing share group '$group'",
        admin.describeShareGroups(Seq(group).asJava).describedGroups().get(group)
      ))
    } catch {
      case e: ExecutionException if e.getCause.isInstanceOf[GroupIdNotFoundException] => None
    }

  private def lagOf(info: SharePartitionOffsetInfo): Option[Long] = Option(info.lag().orElse(null)).map(_.longValue())

  private def unreachable(action: String, cause: Throwable) =
    KafkaShareErrors.brokerUnreachable(connection.bootstrapServers, connection.apiTimeoutMs, action, cause)

  override def close(): Unit = client._2.close(java.time.Duration.ofSeconds(5))

  /** [[await]], with None for a topic or partition that does not exist (a topic deleted, or not created yet). */
  private def awaitIfExists[T](action: String, future: KafkaFuture[T]): Option[T] =
    try Some(await(action, future))
    catch { case _: UnknownTopicOrPartitionException => None }

  private def await[T](action: String, future: KafkaFuture[T]): T = {
    val start = System.nanoTime()
    try {
      val answer = future.get(connection.apiTimeoutMs, TimeUnit.MILLISECONDS)
      answered.incrementAndGet()
      answer
    } catch {
      case e: TimeoutException => throw unreachable(action, e)
      case e: ExecutionException if e.getCause.isInstanceOf[UnknownTopicOrPartitionException] =>
        answered.incrementAndGet() // retriable for Kafka, but an answer: the topic or partition does not exist
        throw e.getCause
      // Kafka's TimeoutException is retriable too: errors the Admin client retried until its deadline.
      case e: ExecutionException if e.getCause.isInstanceOf[RetriableException] => throw unreachable(action, e)
      case e: ExecutionException =>
        throw KafkaShareErrors.refusal(connection.bootstrapServers, action, e.getCause).getOrElse(e)
    } finally waitedNanos.addAndGet(System.nanoTime() - start)
  }
}

private[sparkkafkashare] object ShareGroupAdmin {

  /** The pass-through settings an Admin client knows (security, timeouts), so it logs no unknown-config noise. */
  def adminConfig(connection: KafkaConnection, token: Option[SparkKafkaToken]): java.util.Map[String, Object] = {
    val known = AdminClientConfig.configNames().asScala
    val config = SparkKafkaToken.withLogin(connection.clientSettings(known.contains), token) ++ Map(
      AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG -> connection.bootstrapServers,
      AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG -> connection.apiTimeoutMs.toString,
      AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG -> math.min(connection.apiTimeoutMs, 30000L).toString,
      AdminClientConfig.CLIENT_ID_CONFIG -> s"kafka-share-admin-${connection.groupId}"
    )
    config.asJava.asInstanceOf[java.util.Map[String, Object]]
  }

  /** The partitions of a described topic. */
  def partitionsOf(topic: TopicDescription): Seq[TopicPartition] =
    topic.partitions().asScala.toSeq.map(p => new TopicPartition(topic.name(), p.partition()))
}
