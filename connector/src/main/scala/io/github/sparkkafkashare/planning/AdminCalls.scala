package io.github.sparkkafkashare.planning

import java.util.concurrent.{ExecutionException, TimeUnit, TimeoutException}
import java.util.concurrent.atomic.AtomicLong

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.KafkaConnection
import io.github.sparkkafkashare.security.SparkKafkaToken
import org.apache.kafka.clients.admin.{Admin, AdminClientConfig}
import org.apache.kafka.common.{KafkaException, KafkaFuture}
import org.apache.kafka.common.errors.{RetriableException, UnknownTopicOrPartitionException}

/**
 * The driver's Kafka Admin client and how [[ShareGroupAdmin]] waits for its calls: every call is bounded by
 * `kafka.default.api.timeout.ms`, and a call that gets no answer in time, or a retriable error, throws
 * `KAFKA_SHARE_BROKER_UNREACHABLE`. It counts the calls answered and the time spent waiting.
 */
private[planning] final class AdminCalls(val connection: KafkaConnection) extends AutoCloseable {
  import AdminCalls._

  /** The Admin client; with Spark's delegation token it logs in with the newest at each login. */
  val admin: Admin =
    try Admin.create(adminConfig(connection))
    catch {
      // Kafka says only "Failed to create new KafkaAdminClient"; the cause (a login module, say) is what helps.
      case e: KafkaException => throw KafkaShareErrors.clientNotCreated("Admin client", connection.groupId, e)
    }
  private val answered = new AtomicLong()
  private val waitedNanos = new AtomicLong()

  /** Calls the cluster has answered so far: whether a lookup reached it, even one that needed no call. */
  def callsAnswered: Long = answered.get()

  /** How long the driver has waited for this client's calls so far, in ms. */
  def waitedMs: Long = TimeUnit.NANOSECONDS.toMillis(waitedNanos.get())

  private def unreachable(action: String, cause: Throwable) =
    KafkaShareErrors.brokerUnreachable(connection.bootstrapServers, connection.apiTimeoutMs, action, cause)

  override def close(): Unit = admin.close(java.time.Duration.ofSeconds(5))

  /** [[await]], with None for a topic or partition that does not exist (a topic deleted, or not created yet). */
  def awaitIfExists[T](action: String, future: KafkaFuture[T]): Option[T] =
    try Some(await(action, future))
    catch { case _: UnknownTopicOrPartitionException => None }

  def await[T](action: String, future: KafkaFuture[T]): T = {
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

private[planning] object AdminCalls {

  /** The pass-through settings an Admin client knows (security, timeouts), so it logs no unknown-config noise. */
  def adminConfig(connection: KafkaConnection): java.util.Map[String, Object] = {
    val known = AdminClientConfig.configNames().asScala
    val config =
      SparkKafkaToken.withCurrentLogin(connection.clientSettings(known.contains), connection.bootstrapServers) ++ Map(
        AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG -> connection.bootstrapServers,
        AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG -> connection.apiTimeoutMs.toString,
        AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG -> math.min(connection.apiTimeoutMs, 30000L).toString,
        AdminClientConfig.CLIENT_ID_CONFIG -> s"kafka-share-admin-${connection.groupId}"
      )
    config.asJava.asInstanceOf[java.util.Map[String, Object]]
  }
}
