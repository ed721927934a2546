package io.github.sparkkafkashare

import java.util

import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.executor.KafkaShareRows
import io.github.sparkkafkashare.options.{ConflictingSparkSetting, KafkaShareSourceOptions, KafkaShareSparkConf}
import io.github.sparkkafkashare.security.SecretOptionRedaction
import org.apache.spark.sql.{SparkSession, SQLContext}
import org.apache.spark.sql.connector.catalog.{Table, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.sources.{BaseRelation, DataSourceRegister, RelationProvider}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * `spark.readStream.format("kafka-share")`: a Structured Streaming source that consumes Kafka
 * topics as a share group (KIP-932), acknowledging each record only after Spark commits the
 * micro-batch that holds it. Options are parsed and checked once, when Spark first asks for the
 * schema, so bad input fails at `load()`.
 */
class KafkaShareSourceProvider extends TableProvider with DataSourceRegister with RelationProvider {

  override def shortName(): String = "kafka-share"

  /** What [[inferSchema]] parsed, for [[getTable]], which Spark calls next with the same options. */
  private var parsed: Option[(util.Map[String, String], KafkaShareSourceOptions)] = None

  override def inferSchema(options: CaseInsensitiveStringMap): StructType = {
    val parsedOptions = parse(options.asCaseSensitiveMap()) // first: it checks the Spark and Scala versions
    KafkaShareRows.schema(parsedOptions.includeHeaders)
  }

  override def getTable(
      schema: StructType,
      partitioning: Array[Transform],
      properties: util.Map[String, String]
  ): Table = {
    val options = parse(properties)
    val conf = SparkSession.active.sparkContext.getConf
    KafkaShareSparkConf.consumerCacheTimeout(conf) // read on executors: fail here instead
    options.exactlyOnceStrategy.refuseConflicting(ConflictingSparkSetting.speculation(conf))
    new KafkaShareTable(options)
  }

  /** `spark.read.format("kafka-share")` lands here (the table does not offer batch reads). */
  override def createRelation(sqlContext: SQLContext, parameters: Map[String, String]): BaseRelation = {
    SupportedSpark.check()
    throw KafkaShareErrors.batchReadUnsupported()
  }

  private def parse(properties: util.Map[String, String]): KafkaShareSourceOptions = {
    SupportedSpark.check() // first: on another Scala, the rest of this jar cannot run
    // Before Spark prints the options in a plan: it hides only those its redaction patterns match.
    SecretOptionRedaction.extend(SparkSession.active)
    parsed.collect { case (same, options) if same == properties => options }.getOrElse {
      val options = KafkaShareSourceOptions.parse(new CaseInsensitiveStringMap(properties))
      parsed = Some((new util.HashMap[String, String](properties), options))
      options
    }
  }
}
