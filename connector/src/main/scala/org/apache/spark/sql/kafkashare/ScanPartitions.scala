package org.apache.spark.sql.kafkashare

import org.apache.spark.Partition
import org.apache.spark.sql.connector.read.InputPartition
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDDPartition

/**
 * The input partitions a partition of a DataSource V2 scan's RDD reads: up to Spark 4.0 a sequence
 * of them (`inputPartitions`), from Spark 4.1 at most one (`inputPartition`). Read by name, so one jar
 * runs on both; the method is looked up once.
 */
object ScanPartitions {
  private lazy val inputPartitions: DataSourceRDDPartition => Seq[InputPartition] = {
    val methods = classOf[DataSourceRDDPartition].getMethods.map(m => m.getName -> m).toMap
    (methods.get("inputPartition"), methods.get("inputPartitions")) match {
      case (Some(one), _) => p => one.invoke(p).asInstanceOf[Option[InputPartition]].toList
      case (None, Some(many)) => p => many.invoke(p).asInstanceOf[scala.collection.Seq[InputPartition]].toList
      case _ => _ => Nil
    }
  }

  def read(partition: Partition): Seq[InputPartition] = partition match {
    case p: DataSourceRDDPartition => inputPartitions(p)
    case _ => Nil
  }
}
