package io.github.sparkkafkashare.options

import java.time.Duration

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.spark.SparkConf

/**
 * Settings of the whole Spark application rather than of one query: Spark confs (`--conf`, or the
 * cluster's Spark config), named after the `kafka` source's `spark.kafka.consumer.cache.*`. Checked
 * at `load()` like the options, and read again where they act (on executors).
 */
private[sparkkafkashare] object KafkaShareSparkConf {

  /**
   * How long a JVM keeps a share consumer that no task uses before closing it (it then leaves the
   * group). A consumer holding records its slot's next task is to settle or hand out is kept regardless.
   */
  val ConsumerCacheTimeout = "spark.kafkaShare.consumer.cache.timeout"
  val DefaultConsumerCacheTimeout: Duration = Duration.ofMinutes(5)

  def consumerCacheTimeout(conf: SparkConf): Duration =
    conf.getOption(ConsumerCacheTimeout).fold(DefaultConsumerCacheTimeout) {
      value =>
        val ms =
          try conf.getTimeAsMs(ConsumerCacheTimeout)
          catch { case _: NumberFormatException => 0L }
        if (ms <= 0) {
          throw KafkaShareErrors.invalidOptionValue(
            ConsumerCacheTimeout,
            value,
            "expected a positive duration such as 90s or 5m (a Spark conf: set it with --conf or in the cluster's Spark config)"
          )
        }
        Duration.ofMillis(ms)
    }
}
