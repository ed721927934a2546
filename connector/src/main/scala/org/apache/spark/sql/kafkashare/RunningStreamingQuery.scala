package org.apache.spark.sql.kafkashare

import java.util.UUID

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.classic
import org.apache.spark.sql.connector.read.streaming.{Offset, SparkDataStream}
import org.apache.spark.sql.execution.streaming.ProcessingTimeTrigger
import org.apache.spark.sql.execution.streaming.runtime.{AsyncProgressTrackingMicroBatchExecution, StreamExecution}

/**
 * The streaming query a source runs in, as Spark registered it before starting the query's thread.
 * The DataSource V2 API passes a source neither the query's trigger nor how it tracks progress, so
 * they are read here (Spark-internal API, hence this package).
 */
final class RunningStreamingQuery private (execution: StreamExecution) {

  /**
   * Whether the query runs without a trigger interval (Spark's default trigger, or a processing-time
   * trigger of 0): Spark then asks its sources again right after a trigger that ran no batch.
   */
  def runsBackToBack: Boolean = execution.trigger == ProcessingTimeTrigger(0L)

  /**
   * Whether the query writes its offset and commit logs in the background (the writeStream option
   * `asyncProgressTrackingEnabled`): then a batch's commit log entry may be written after the next
   * batch has started, or only in memory, and the offset log holds only some batches.
   */
  def tracksProgressAsynchronously: Boolean = execution.isInstanceOf[AsyncProgressTrackingMicroBatchExecution]

  /** The end offset of `stream`'s last batch that the query has committed, as the query holds it in memory. */
  def committedOffset(stream: SparkDataStream): Option[Offset] = execution.committedOffsets.get(stream)
}

object RunningStreamingQuery {
  /** The query whose stream thread calls this; None when it cannot be found. */
  def of(session: SparkSession): Option[RunningStreamingQuery] = session match {
    case session: classic.SparkSession =>
      Option(session.sparkContext.getLocalProperty(StreamExecution.QUERY_ID_KEY))
        .flatMap(id => Option(session.sharedState.activeStreamingQueries.get(UUID.fromString(id))))
        .map(new RunningStreamingQuery(_))
    case _ => None
  }
}
