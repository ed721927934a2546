package io.github.sparkkafkashare.planning

import io.github.sparkkafkashare.metrics.KafkaShareSourceMetrics
import org.apache.spark.util.LongAccumulator

/** The source's counters on the driver, without a SparkContext: the tests add what the tasks would report. */
private[planning] object TestCounters {
  def apply(): KafkaShareSourceMetrics = {
    val c = Array.fill(14)(new LongAccumulator)
    KafkaShareSourceMetrics(c(0), c(1), c(2), c(3), c(4), c(5), c(6), c(7), c(8), c(9), c(10), c(11), c(12), c(13))
  }
}
