package io.github.sparkkafkashare

import scala.util.Try

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.spark.sql.streaming.Trigger

/**
 * Spark's real-time trigger, for callers that cannot name it: PySpark 4.1 has real-time mode but no
 * `realTime` argument to `trigger()` (`spark_kafka_share.real_time_trigger` calls this). On Spark
 * before 4.1, which has no real-time mode, it fails with `KAFKA_SHARE_REAL_TIME_NEEDS_SPARK`.
 */
object KafkaShareTriggers {

  /** `Trigger.RealTime(batchDuration)`, such as "5 minutes": how long each batch runs. */
  def realTime(batchDuration: String): Trigger = {
    val method = Try(classOf[Trigger].getMethod("RealTime", classOf[String])).getOrElse(
      throw KafkaShareErrors.realTimeNeedsSpark(org.apache.spark.SPARK_VERSION)
    )
    try method.invoke(null, batchDuration).asInstanceOf[Trigger]
    catch { case e: java.lang.reflect.InvocationTargetException => throw e.getCause }
  }
}
