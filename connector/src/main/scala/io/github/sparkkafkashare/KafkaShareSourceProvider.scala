package io.github.sparkkafkashare

import java.util

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.{KafkaShareSourceOptions, KafkaShareSparkConf}
import org.apache.spark.sql.{SparkSession, SQLContext}
import org.apache.spark.sql.connector.catalog.{Table, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
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
