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

  def consumerCacheTimeout(conf: SparkConf): Duration = conf.getOption(ConsumerCacheTimeout).fold(DefaultConsumerCacheTimeout) {
    value =>
      val ms = try conf.getTimeAsMs(ConsumerCacheTimeout) catch { case _: NumberFormatException => 0L }
      if (ms <= 0) {
        throw KafkaShareErrors.invalidOptionValue(ConsumerCacheTimeout, value,
          "expected a positive duration such as 90s or 5m (a Spark conf: set it with --conf or in the cluster's Spark config)")
      }
      Duration.ofMillis(ms)
  }

  val Speculation = "spark.speculation"

  /**
   * The strategies that log rounds keep one file per slot and round. Speculative execution runs a
   * second attempt of a slow task beside the first, on another executor, with a consumer of its own:
   * if both poll before either has logged, they log different records for the same round.
   */
  def checkSpeculation(conf: SparkConf, options: KafkaShareSourceOptions): Unit =
    if (ExactlyOnceStrategy.logsRecords(options.exactlyOnceStrategy) && conf.getBoolean(Speculation, false)) {
      throw KafkaShareErrors.conflictingOptions(Seq(Speculation, KafkaShareSourceOptions.ExactlyOnceStrategyOption),
        s"Strategy '${options.exactlyOnceStrategy.name}' needs one attempt of a task at a time: set $Speculation=false " +
          "for this application (a Spark conf), or use strategy 'none' or 'idempotent'.")
    }
}
