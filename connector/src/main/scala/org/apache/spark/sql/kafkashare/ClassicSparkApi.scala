package org.apache.spark.sql.kafkashare

import org.apache.spark.sql.{Dataset, SparkSession}
import org.apache.spark.sql.execution.QueryExecution
import org.apache.spark.sql.internal.SharedState

/**
 * What the connector reads off a classic session and its DataFrames. Spark 4.0 moved these methods
 * to the classes of `org.apache.spark.sql.classic`; in Spark 3.5 the public classes have them. They
 * are looked up by name on the object at hand, so one jar runs on both; a Spark Connect session or
 * DataFrame has none of them.
 */
object ClassicSparkApi {

  /** The state the session shares with its siblings (the running streaming queries among it). */
  def sharedState(session: SparkSession): Option[SharedState] =
    call(session, "sharedState").collect { case s: SharedState => s }

  /** The execution of a DataFrame, whose RDD holds the input partitions of its scans. */
  def queryExecution(df: Dataset[_]): Option[QueryExecution] =
    call(df, "queryExecution").collect { case q: QueryExecution => q }

  private def call(target: AnyRef, method: String): Option[AnyRef] =
    try Some(target.getClass.getMethod(method).invoke(target))
    catch { case _: NoSuchMethodException => None }
}
