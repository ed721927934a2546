package io.github.sparkkafkashare.executor

import org.apache.kafka.clients.consumer.ConsumerRecord
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.unsafe.types.UTF8String

/** Rows in the source's schema; see KafkaShareTable.schema. */
private[sparkkafkashare] object KafkaShareRows {
  def deliveryCount(r: ConsumerRecord[_, _]): Int = r.deliveryCount().orElse(1.toShort).toInt

  /** Columns as in Spark's `kafka` source, plus deliveryCount: one array a row, filled in place. */
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
      columns(7) = new GenericArrayData(r.headers().toArray.map(h => InternalRow(UTF8String.fromString(h.key()), h.value()): Any))
    }
    columns(columns.length - 1) = deliveryCount
    new GenericInternalRow(columns)
  }
}
