package io.github.sparkkafkashare.options

import java.util.Locale

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.errors.KafkaShareErrors
import org.apache.kafka.clients.admin.AdminClientConfig
import org.apache.kafka.clients.consumer.ConsumerConfig
import org.apache.kafka.clients.producer.ProducerConfig

/**
 * Option names that are neither the source's nor Kafka's. Spark's own `kafka` source ignores
 * options it does not know, but here a misspelled guarantee is a silent loss of that guarantee:
 * `kafka.share.exactly.once.strategy` with one letter wrong would pass to the Kafka client, which
 * logs it as unused, and the query would run with no exactly-once strategy. So these are refused at
 * `load()`, each naming the option it most likely meant:
 *
 *  - a `kafka.*` setting that none of the source's Kafka clients knows. Kafka hands every setting to the plugins
 *    it loads (SASL login classes and callback handlers, metric reporters, config providers), which
 *    may read settings of their own: once one of those is set, other settings pass, unless they are
 *    a letter or two away from a known one;
 *  - an option without the `kafka.` prefix a letter or two away from one of the source's (further
 *    off, it is not taken for one of ours, and Spark's convention of ignoring it holds).
 */
private[options] object OptionNames {

  /**
   * Kafka client settings: the share consumer's (a consumer's), the driver's Admin client's, and the
   * dead-letter producer's.
   */
  private lazy val kafkaSettings: Set[String] = (ConsumerConfig.configNames().asScala ++
    AdminClientConfig.configNames().asScala ++ ProducerConfig.configNames().asScala).toSet

  /** Settings naming plugins that Kafka hands every setting to. */
  val PluginSettings: Seq[String] = Seq(
    "sasl.login.class",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "metric.reporters",
    "config.providers"
  )

  /**
   * Refuses a pass-through setting (a `kafka.*` option, prefix removed) that Kafka's clients do not
   * know; `sourceOptions` are the source's own `kafka.*` options, for the suggestion.
   */
  def checkKafkaSettings(settings: Set[String], sourceOptions: Set[String]): Unit = {
    val pluginsSet = PluginSettings.exists(settings.contains)
    val known = kafkaSettings.map("kafka." + _) ++ sourceOptions
    settings.filterNot(kafkaSettings.contains).toSeq.sorted.foreach { setting =>
      val option = s"kafka.$setting"
      val meant = nearest(option, known)
      if (!pluginsSet || meant.isDefined) throw KafkaShareErrors.unknownOption(option, meant, unknownKafkaHint(setting))
    }
  }

  /** Refuses an option without the `kafka.` prefix that is a letter or two away from one of `sourceOptions`. */
  def checkSourceOptions(options: Set[String], sourceOptions: Set[String]): Unit = {
    val lowerCase = sourceOptions.map(_.toLowerCase(Locale.ROOT))
    options.filterNot(o =>
      o.toLowerCase(Locale.ROOT).startsWith("kafka.") || lowerCase.contains(o.toLowerCase(Locale.ROOT))
    )
      .toSeq.sorted.foreach { option =>
        nearest(option, sourceOptions).foreach(meant =>
          throw KafkaShareErrors.unknownOption(
            option,
            Some(meant),
            "Options are case-insensitive; a misspelled one would be ignored, and the query would run without it."
          )
        )
      }
  }

  private def unknownKafkaHint(setting: String): String =
    if (setting.toLowerCase(Locale.ROOT).startsWith("share.")) {
      "The source's own options that start with 'kafka.share.' are listed in the user guide; any other " +
        "'kafka.share.*' option passes to Kafka's share consumer, which has no such setting."
    } else {
      "Kafka's clients have no such setting, so it would be ignored. A setting that a SASL login class, callback " +
        s"handler, metric reporter or config provider reads passes once the plugin is set (${PluginSettings.mkString(", ")})."
    }

  /** The name in `known` nearest `name`, ignoring case, if it is within a letter or two. */
  private def nearest(name: String, known: Set[String]): Option[String] = {
    val lower = name.toLowerCase(Locale.ROOT)
    val allowed = if (lower.length >= 8) 2 else 1
    known.toSeq.map(k => k -> distance(lower, k.toLowerCase(Locale.ROOT))).filter(_._2 <= allowed)
      .sortBy { case (k, d) => (d, k) }.headOption.map(_._1)
  }

  /** Edits (insert, delete, replace, swap two neighbours) that turn `a` into `b`. */
  private def distance(a: String, b: String): Int = {
    val d = Array.tabulate(a.length + 1, b.length + 1)((i, j) => if (i == 0) j else if (j == 0) i else 0)
    for (i <- 1 to a.length; j <- 1 to b.length) {
      val cost = if (a(i - 1) == b(j - 1)) 0 else 1
      d(i)(j) = math.min(math.min(d(i - 1)(j) + 1, d(i)(j - 1) + 1), d(i - 1)(j - 1) + cost)
      if (i > 1 && j > 1 && a(i - 1) == b(j - 2) && a(i - 2) == b(j - 1))
        d(i)(j) = math.min(d(i)(j), d(i - 2)(j - 2) + 1)
    }
    d(a.length)(b.length)
  }
}
