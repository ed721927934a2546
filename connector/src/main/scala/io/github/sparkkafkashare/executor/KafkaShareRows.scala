package io.github.sparkkafkashare.executor

import org.apache.kafka.clients.consumer.ConsumerRecord
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** The source's schema, and its rows. */
private[sparkkafkashare] object KafkaShareRows {
  private val headersType = ArrayType(StructType(Seq(
    StructField("key", StringType),
    StructField("value", BinaryType)
  )))

  /** Spark's `kafka` source schema, in its order, plus `deliveryCount` (1 on first delivery). */
  def schema(includeHeaders: Boolean): StructType = StructType(
    Seq(
      StructField("key", BinaryType),
      StructField("value", BinaryType),
      StructField("topic", StringType),
      StructField("partition", IntegerType),
      StructField("offset", LongType),
      StructField("timestamp", TimestampType),
      StructField("timestampType", IntegerType)
    ) ++
      (if (includeHeaders) Seq(StructField("headers", headersType)) else Nil) :+
      StructField("deliveryCount", IntegerType)
  )

  def deliveryCount(r: ConsumerRecord[_, _]): Int = r.deliveryCount().orElse(1.toShort).toInt

  /** A row of [[schema]]: one array a row, filled in place. */
  def toRow(r: ConsumerRecord[Array[Byte], Array[Byte]], includeHeaders: Boolean, deliveryCount: Int): InternalRow = {
    val columns = new Array[Any](if (includeHeaders) 9 else 8)
    columns(0) = r.key()
    columns(1) = r.value()
    columns(2) = UTF8String.fromString(r.topic())
    columns(3) = r.partition()
    columns(4) = r.offset()
    columns(5) = r.timestamp() * 1000L // TimestampType is microseconds
    columns(6) = r.timestampType().id
    if (includeHeaders) {
      columns(7) =
        new GenericArrayData(r.headers().toArray.map(h => InternalRow(UTF8String.fromString(h.key()), h.value()): Any))
    }
    columns(columns.length - 1) = deliveryCount
    new GenericInternalRow(columns)
  }
}
