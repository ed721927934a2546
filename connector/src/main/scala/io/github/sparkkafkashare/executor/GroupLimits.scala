package io.github.sparkkafkashare.executor

/**
 * The group settings that shape a query's rounds, its consumers' lock renewal and their first poll.
 *
 * @param renewAllowed            whether members may renew the locks of records they hold
 *                                (`share.renew.acknowledge.enable`, Kafka 4.3; else yes)
 * @param recordLocksPerPartition records of one partition the group may hold unacknowledged at once
 *                                (`share.partition.max.record.locks`, Kafka 4.3; else Kafka's default)
 * @param lockDurationMs          how long an acquired record stays locked (`share.record.lock.duration.ms`)
 * @param assignmentIntervalMs    the least time between two assignments of the group's partitions
 *                                (`share.assignment.interval.ms`): how long a member that joins after
 *                                another may wait for its partitions
 */
private[sparkkafkashare] final case class GroupLimits(
    renewAllowed: Boolean,
    recordLocksPerPartition: Int,
    lockDurationMs: Long,
    assignmentIntervalMs: Long
)
