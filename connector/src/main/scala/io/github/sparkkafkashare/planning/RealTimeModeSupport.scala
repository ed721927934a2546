package io.github.sparkkafkashare.planning

import scala.util.Try

import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.spark.sql.SparkSession

/**
 * Where Spark lines differ on real-time mode: Spark 4.1 added it, and its interfaces. On Spark 4.1
 * and later a query's stream is a [[KafkaShareMicroBatchStream]] that also runs in real-time mode
 * (`KafkaShareRealTimeStream`, which this jar carries only when built against Spark 4.1 or later);
 * on earlier lines, one that does not, made without loading that class.
 */
private[sparkkafkashare] object RealTimeModeSupport {
  private val RealTimeStream = "io.github.sparkkafkashare.planning.KafkaShareRealTimeStream"

  /** Whether this Spark has real-time mode and this jar the classes for it. */
  lazy val available: Boolean = Try {
    Class.forName("org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode", false, getClass.getClassLoader)
    Class.forName(RealTimeStream, false, getClass.getClassLoader)
  }.isSuccess

  def stream(
      options: KafkaShareSourceOptions,
      checkpointLocation: String,
      session: SparkSession
  ): KafkaShareMicroBatchStream =
    if (!available) new KafkaShareMicroBatchStream(options, checkpointLocation, session)
    else {
      val constructor = Class.forName(RealTimeStream, true, getClass.getClassLoader)
        .getConstructor(classOf[KafkaShareSourceOptions], classOf[String], classOf[SparkSession])
      try constructor.newInstance(options, checkpointLocation, session).asInstanceOf[KafkaShareMicroBatchStream]
      catch { case e: java.lang.reflect.InvocationTargetException => throw e.getCause }
    }
}
