package org.apache.spark.sql.kafkashare

import java.util.UUID

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.classic
import org.apache.spark.sql.execution.streaming.ProcessingTimeTrigger
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution

/**
 * The trigger of the streaming query a source runs in. The DataSource V2 API does not pass it to a
 * source, so it is read from the query Spark registers before starting it (Spark-internal API, hence
 * this package).
 */
object StreamingQueryTrigger {

  /**
   * Whether the query whose stream thread calls this runs without a trigger interval (Spark's default
   * trigger, or a processing-time trigger of 0): Spark then asks its sources again right after a
   * trigger that ran no batch. False when the query cannot be found.
   */
  def runsBackToBack(session: SparkSession): Boolean = session match {
    case session: classic.SparkSession =>
      Option(session.sparkContext.getLocalProperty(StreamExecution.QUERY_ID_KEY))
        .flatMap(id => Option(session.sharedState.activeStreamingQueries.get(UUID.fromString(id))))
        .exists(_.trigger == ProcessingTimeTrigger(0L))
    case _ => false
  }
}
