package org.apache.spark.sql.kafkashare

import java.util.UUID

import scala.util.Try

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.streaming.{Offset, SparkDataStream}
import org.apache.spark.sql.execution.streaming.ProcessingTimeTrigger

/**
 * The streaming query a source runs in, as Spark registered it before starting the query's thread.
 * The DataSource V2 API passes a source neither the query's trigger nor how it tracks progress, so
 * they are read here (Spark-internal API, hence this package). The query's classes moved in Spark
 * 4.1 ([[StreamExecutionClasses]]), so the query is held as an object and read by method name.
 */
final class RunningStreamingQuery private (execution: AnyRef) {

  /**
   * Whether the query runs without a trigger interval (Spark's default trigger, or a processing-time
   * trigger of 0): Spark then asks its sources again right after a trigger that ran no batch.
   */
  def runsBackToBack: Boolean = call("trigger") == ProcessingTimeTrigger(0L)

  /** Whether the query runs in real-time mode (a real-time trigger, Spark 4.1 and later). */
  def runsInRealTime: Boolean = call("trigger").getClass.getSimpleName == "RealTimeTrigger"

  /**
   * Whether the query writes its offset and commit logs in the background (the writeStream option
   * `asyncProgressTrackingEnabled`): then a batch's commit log entry may be written after the next
   * batch has started, or only in memory, and the offset log holds only some batches.
   */
  def tracksProgressAsynchronously: Boolean =
    StreamExecutionClasses.asyncProgressTracking.exists(_.isInstance(execution))

  /** The end offset of `stream`'s last batch that the query has committed, as the query holds it in memory. */
  def committedOffset(stream: SparkDataStream): Option[Offset] = call("committedOffsets") match {
    case committed: scala.collection.Map[SparkDataStream @unchecked, Offset @unchecked] => committed.get(stream)
    case _ => None
  }

  /**
   * The classes of the query's sink, to tell how it writes: its table's (Spark-internal), and the
   * writer's where the table wraps one (`foreach`: a `ForeachWriter`, or Python's).
   */
  def sinkClassNames: Seq[String] = Try(call("sink")).toOption.flatMap(Option(_)).toSeq.flatMap { sink =>
    sink.getClass.getName +: Try(sink.getClass.getMethod("writer").invoke(sink)).toOption.flatMap(Option(_))
      .map(_.getClass.getName).toSeq
  }

  private def call(method: String): AnyRef = execution.getClass.getMethod(method).invoke(execution)
}

object RunningStreamingQuery {

  /** The local property Spark sets on a query's thread to its id (StreamExecution.QUERY_ID_KEY). */
  private val QueryIdKey = "sql.streaming.queryId"

  /** The query whose stream thread calls this; None when it cannot be found. */
  def of(session: SparkSession): Option[RunningStreamingQuery] = for {
    id <- Option(session.sparkContext.getLocalProperty(QueryIdKey))
    state <- ClassicSparkApi.sharedState(session)
    // As the map's values, untyped: their class is in a package that depends on the Spark version.
    execution <- Option((state.activeStreamingQueries: java.util.Map[UUID, _ <: AnyRef]).get(UUID.fromString(id)))
  } yield new RunningStreamingQuery(execution)
}

/** The classes of a running query, in `org.apache.spark.sql.execution.streaming.runtime` from Spark 4.1 and one package up before. */
private object StreamExecutionClasses {
  val asyncProgressTracking: Option[Class[_]] = load("AsyncProgressTrackingMicroBatchExecution")

  private def load(name: String): Option[Class[_]] =
    Seq("org.apache.spark.sql.execution.streaming.runtime.", "org.apache.spark.sql.execution.streaming.").iterator
      .map(pkg => Try(Class.forName(pkg + name, false, getClass.getClassLoader)).toOption)
      .collectFirst { case Some(c) => c }
}
