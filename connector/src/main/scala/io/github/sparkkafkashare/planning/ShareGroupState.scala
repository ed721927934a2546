package io.github.sparkkafkashare.planning

/** A share group as Kafka's Admin API describes it. */
private[sparkkafkashare] final case class ShareGroupState(
    groupId: String,
    state: String,
    members: Seq[ShareGroupMember],
    partitions: Seq[SharePartitionState]
)
private[sparkkafkashare] final case class ShareGroupMember(
    memberId: String,
    clientId: String,
    host: String,
    assignment: Seq[(String, Int)]
)

/**
 * @param startOffset Kafka's share-partition start offset: everything below it is finished
 * @param lag         records not yet finished (available, or acquired and unacknowledged); None if not computed
 */
private[sparkkafkashare] final case class SharePartitionState(
    topic: String,
    partition: Int,
    startOffset: Long,
    lag: Option[Long]
)
