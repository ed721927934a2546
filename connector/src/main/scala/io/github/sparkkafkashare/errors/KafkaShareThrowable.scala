package io.github.sparkkafkashare.errors

import scala.jdk.CollectionConverters._

import org.apache.spark.SparkThrowable

/** Shared by the exception classes below so PySpark and Spark's error framework see a condition. */
private[sparkkafkashare] trait KafkaShareThrowable extends SparkThrowable {
  def condition: String
  def parameters: Map[String, String]
  // Spark 4 reads getCondition, Spark 3.5 getErrorClass (deprecated since 4.0): both name the condition.
  def getCondition: String = condition
  override def getErrorClass: String = condition
  override def getMessageParameters: java.util.Map[String, String] = parameters.asJava
  override def getSqlState: String = KafkaShareErrors.sqlState(condition)
}
