package io.github.sparkkafkashare.executor

import io.github.sparkkafkashare.acknowledgements.AcknowledgementMarks
import org.apache.spark.sql.connector.read.InputPartition

/**
 * One slot's share of one round: the task that settles what the slot's consumer holds and then
 * (unless `poll` is false) polls the next records.
 *
 * @param committedThrough every round up to this one is committed by Spark: records held from
 *                         those rounds are ACCEPTed (or acknowledged as `marks` say), any others
 *                         RELEASEd.
 * @param marks            explicit mode: what user code chose for records of the committed round
 * @param homes            per slot, the executor whose consumer last read it (alive or not): a
 *                         consumer elsewhere that still holds records of its slot was left behind
 * @param poll             false for a round that only settles (a replayed batch after a restart,
 *                         or the closing round of Trigger.AvailableNow)
 * @param consumerConfig   the share consumer's settings; may hold secrets, never log it
 * @param groupLimits      the group's limits as the driver last read them: whether the slot renews
 *                         locks, and their duration until the broker reports it
 * @param afterLog         `kafka.share.acknowledge=after-log`: how far the slot's round polls on
 */
private[sparkkafkashare] final case class KafkaShareInputPartition(
    runId: String,
    slot: Int,
    round: Long,
    committedThrough: Long,
    marks: AcknowledgementMarks,
    homes: Map[Int, String],
    poll: Boolean,
    topics: Set[String],
    consumerConfig: Map[String, String],
    includeHeaders: Boolean,
    pollTimeoutMs: Long,
    groupLimits: GroupLimits,
    location: Option[String],
    afterLog: Option[AfterLogBudget] = None
) extends InputPartition {

  /**
   * Set on the driver: where the slot's consumer is now. Spark asks again for every job that reads
   * the batch, so a batch evaluated again (foreachBatch) goes to the executor whose consumer took
   * the slot over after the planned one died, and finds the records it holds there.
   */
  @transient private[sparkkafkashare] var currentLocation: () => Option[String] = () => None

  /** The executor whose consumer last read this slot. */
  def home: Option[String] = homes.get(slot)

  override def preferredLocations(): Array[String] = currentLocation().orElse(location).toArray

  override def toString: String = s"KafkaShareInputPartition(slot=$slot, round=$round, poll=$poll)"
}

/**
 * How far a slot's round polls on under `after-log`, where each poll's records are ACCEPTed once
 * logged: until a poll brings nothing, the round holds `records`, or `pollingMs` have passed.
 *
 * @param partPoll how long a poll after the round's first waits for records: the slot has been
 *                 outpaced by the others, or the backlog is drained, if none come in that time
 */
private[sparkkafkashare] final case class AfterLogBudget(records: Long, pollingMs: Long, partPoll: java.time.Duration)
