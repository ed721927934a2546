package io.github.sparkkafkashare.options

import scala.util.Try

/**
 * Numbers and flags read from strings, None where the string is not one: what Scala 2.13's
 * `toIntOption` and its kind give, which Scala 2.12, the build for Spark 3.5, lacks.
 */
private[sparkkafkashare] object Parsing {
  def int(s: String): Option[Int] = Try(Integer.parseInt(s)).toOption

  def long(s: String): Option[Long] = Try(java.lang.Long.parseLong(s)).toOption

  /** `true` or `false`, in any case. */
  def boolean(s: String): Option[Boolean] =
    if (s.equalsIgnoreCase("true")) Some(true) else if (s.equalsIgnoreCase("false")) Some(false) else None
}
