package io.github.sparkkafkashare

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import io.github.sparkkafkashare.options.KafkaShareSourceOptions
import io.github.sparkkafkashare.planning.ShareGroupAdmin
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * Share-group state for notebooks, monitoring and tests, read through Kafka's Admin API with the
 * same options as the source (`kafka.bootstrap.servers`, `kafka.share.group.id`, `kafka.*`).
 * The Python package calls [[describeJson]] over Py4J.
 */
object KafkaShareGroups {

  /**
   * The group as JSON: `{"groupId", "exists", "state", "members": [{"memberId", "clientId", "host",
   * "assignment": [{"topic", "partition"}]}], "partitions": [{"topic", "partition", "startOffset", "lag"}]}`,
   * where `lag` is null when Kafka has not computed it.
   */
  def describeJson(options: java.util.Map[String, String]): String = {
    val connection = KafkaShareSourceOptions.parseConnection(new CaseInsensitiveStringMap(options))
    val admin = new ShareGroupAdmin(connection)
    val state =
      try admin.describe()
      finally admin.close()
    val json = state match {
      case None => Map(
          "groupId" -> connection.groupId,
          "exists" -> false,
          "state" -> null,
          "members" -> List.empty.asJava,
          "partitions" -> List.empty.asJava
        )
      case Some(s) => Map(
          "groupId" -> s.groupId,
          "exists" -> true,
          "state" -> s.state,
          "members" -> s.members.map(m =>
            Map(
              "memberId" -> m.memberId,
              "clientId" -> m.clientId,
              "host" -> m.host,
              "assignment" -> m.assignment.map { case (t, p) => Map("topic" -> t, "partition" -> p).asJava }.asJava
            ).asJava
          ).asJava,
          "partitions" -> s.partitions.map(p =>
            Map(
              "topic" -> p.topic,
              "partition" -> p.partition,
              "startOffset" -> p.startOffset,
              "lag" -> p.lag.map(Long.box).orNull
            ).asJava
          ).asJava
        )
    }
    new ObjectMapper().writeValueAsString(json.asJava)
  }
}
