package org.apache.spark.sql.kafkashare

import org.apache.spark.SparkEnv
import org.apache.spark.scheduler.ExecutorCacheTaskLocation

/**
 * Spark-internal API, hence this package (as for [[QueryRunRegistry]]): naming executors as
 * task locations, as Spark's own Kafka source does, so that a slot's tasks go back to the executor
 * whose JVM holds that slot's share consumer (only that consumer can acknowledge its records).
 */
object ExecutorLocality {

  /** Task locations of the live executors, sorted so every planning round sees the same order. */
  def sortedExecutors(): Seq[String] = {
    val blockManager = SparkEnv.get.blockManager
    blockManager.master.getPeers(blockManager.blockManagerId)
      .map(id => ExecutorCacheTaskLocation(id.host, id.executorId))
      .sortBy(location => (location.host, location.executorId))
      .map(_.toString)
  }

  /** The task location of the JVM this runs in (an executor, or the driver in local mode). */
  def currentExecutor(): String =
    runningExecutor().getOrElse(throw new IllegalStateException("No SparkContext runs in this JVM"))

  /** [[currentExecutor]], or None in a JVM without Spark running (a driver between two SparkContexts). */
  def runningExecutor(): Option[String] = Option(SparkEnv.get).map { env =>
    ExecutorCacheTaskLocation(env.blockManager.blockManagerId.host, env.executorId).toString
  }
}
