package io.github.sparkkafkashare

import java.util

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.executor.KafkaShareRows
import io.github.sparkkafkashare.metrics.KafkaShareTaskMetric
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import io.github.sparkkafkashare.planning.RealTimeModeSupport
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.metric.CustomMetric
import org.apache.spark.sql.connector.read.{Scan, ScanBuilder}
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** The table `load()` returns: a schema, and micro-batch reads only. */
private[sparkkafkashare] final class KafkaShareTable(options: KafkaShareSourceOptions) extends Table with SupportsRead {

  override def name(): String = s"kafka-share[group=${options.groupId}]"

  override def schema(): StructType = KafkaShareRows.schema(options.includeHeaders)

  override def capabilities(): util.Set[TableCapability] = Set(TableCapability.MICRO_BATCH_READ).asJava

  override def newScanBuilder(ignored: CaseInsensitiveStringMap): ScanBuilder = () =>
    new Scan {
      override def readSchema(): StructType = schema()
      override def description(): String = name()
      override def toMicroBatchStream(checkpointLocation: String): MicroBatchStream =
        RealTimeModeSupport.stream(options, checkpointLocation, SparkSession.active)
      // Per batch on the scan node of the Spark UI's SQL tab; the query-wide totals are the source metrics.
      override def supportedCustomMetrics(): Array[CustomMetric] = KafkaShareTaskMetric.all
    }
}
