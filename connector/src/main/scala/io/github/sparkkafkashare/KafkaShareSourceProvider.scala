package io.github.sparkkafkashare

import java.util

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.metrics.KafkaShareCountMetric
import io.github.sparkkafkashare.options.{KafkaShareSourceOptions, KafkaShareSparkConf}
import io.github.sparkkafkashare.planning.KafkaShareMicroBatchStream
import org.apache.spark.sql.{SparkSession, SQLContext}
import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.metric.CustomMetric
import org.apache.spark.sql.connector.read.{Scan, ScanBuilder}
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream
import org.apache.spark.sql.sources.{BaseRelation, DataSourceRegister, RelationProvider}
import org.apache.spark.sql.types._
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * `spark.readStream.format("kafka-share")`: a Structured Streaming source that consumes Kafka
 * topics as a share group (KIP-932), acknowledging each record only after Spark commits the
 * micro-batch that holds it. Options are parsed and checked when the table is created, so bad
 * input fails at `load()`.
 */
class KafkaShareSourceProvider extends TableProvider with DataSourceRegister with RelationProvider {

  override def shortName(): String = "kafka-share"

  override def inferSchema(options: CaseInsensitiveStringMap): StructType =
    KafkaShareTable.schema(KafkaShareSourceOptions.parse(options).includeHeaders)

  override def getTable(schema: StructType, partitioning: Array[Transform], properties: util.Map[String, String]): Table = {
    val options = KafkaShareSourceOptions.parse(new CaseInsensitiveStringMap(properties))
    val conf = SparkSession.active.sparkContext.getConf
    KafkaShareSparkConf.consumerCacheTimeout(conf) // read on executors: fail here instead
    KafkaShareSparkConf.checkSpeculation(conf, options)
    new KafkaShareTable(options)
  }

  /** `spark.read.format("kafka-share")` lands here (the table does not offer batch reads). */
  override def createRelation(sqlContext: SQLContext, parameters: Map[String, String]): BaseRelation =
    throw KafkaShareErrors.batchReadUnsupported()
}

private[sparkkafkashare] final class KafkaShareTable(options: KafkaShareSourceOptions) extends Table with SupportsRead {

  override def name(): String = s"kafka-share[group=${options.groupId}]"

  override def schema(): StructType = KafkaShareTable.schema(options.includeHeaders)

  override def capabilities(): util.Set[TableCapability] = Set(TableCapability.MICRO_BATCH_READ).asJava

  override def newScanBuilder(ignored: CaseInsensitiveStringMap): ScanBuilder = () => new Scan {
    override def readSchema(): StructType = schema()
    override def description(): String = name()
    override def toMicroBatchStream(checkpointLocation: String): MicroBatchStream =
      new KafkaShareMicroBatchStream(options, checkpointLocation, SparkSession.active)
    // Per batch on the scan node of the Spark UI's SQL tab; the query-wide totals are the source metrics.
    override def supportedCustomMetrics(): Array[CustomMetric] = KafkaShareCountMetric.all
  }
}

private[sparkkafkashare] object KafkaShareTable {
  private val headersType = ArrayType(StructType(Seq(
    StructField("key", StringType), StructField("value", BinaryType))))

  /** Spark's `kafka` source schema, in its order, plus `deliveryCount` (1 on first delivery). */
  def schema(includeHeaders: Boolean): StructType = StructType(
    Seq(
      StructField("key", BinaryType),
      StructField("value", BinaryType),
      StructField("topic", StringType),
      StructField("partition", IntegerType),
      StructField("offset", LongType),
      StructField("timestamp", TimestampType),
      StructField("timestampType", IntegerType)) ++
      (if (includeHeaders) Seq(StructField("headers", headersType)) else Nil) :+
      StructField("deliveryCount", IntegerType))
}
