package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.executor.KafkaShareRealTimeReaderFactory
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.connector.read.streaming.{Offset, PartitionOffset, SupportsRealTimeMode}

/**
 * The stream of a query on Spark 4.1 and later, which can also run in real-time mode: the interfaces
 * are Spark 4.1's, so this class is built from sources of its own, and [[RealTimeModeSupport]] makes
 * it only where Spark has them. The work is [[KafkaShareMicroBatchStream]]'s.
 */
private[sparkkafkashare] final class KafkaShareRealTimeStream(
    options: KafkaShareSourceOptions,
    checkpointLocation: String,
    session: SparkSession
) extends KafkaShareMicroBatchStream(options, checkpointLocation, session) with SupportsRealTimeMode {

  override def prepareForRealTimeMode(): Unit = prepareRealTime()

  override def planInputPartitions(start: Offset): Array[InputPartition] = planRealTime(start)

  override def mergeOffsets(ends: Array[PartitionOffset]): Offset = mergeRealTimeOffsets(ends)

  override def createReaderFactory(): PartitionReaderFactory =
    realTimeAcceptPoint.fold(super.createReaderFactory())(KafkaShareRealTimeReaderFactory(counters, slotLocations, _))
}
