package io.github.sparkkafkashare.executor

import java.util.concurrent.TimeUnit.MILLISECONDS

import scala.annotation.tailrec
import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.acknowledgements.{LoggedRecord, RecordCoordinates, RoundRecordsLog}
import org.apache.kafka.clients.consumer.ConsumerRecord
import org.apache.spark.sql.catalyst.InternalRow

/**
 * `two-phase-commit` with `kafka.share.acknowledge=after-log` on the executor. A slot logs its round
 * in parts, one per poll ([[RoundRecordsLog]]), and ACCEPTs each part's records as soon as their part
 * is in the log: a batch that never commits reads them back from there, so the group need not keep
 * them. The group's lock limit then bounds a poll, not a batch, and the slot polls again while
 * records come, within the round's [[AfterLogBudget]].
 *
 * Every part is written first-writer-wins, and an empty part ends the slot's round, so attempts of
 * one task agree on the round's records: an attempt that finds a part written by another RELEASEs
 * what it polled, and one that does not poll (Spark evaluates the batch again, here or elsewhere)
 * first ends the round where its parts end. Either then returns the parts as logged, less the
 * records that parts which logged the round before them name (a record can be in two parts when its
 * lock lapsed before its first part was written).
 */
private[executor] final class AfterLogPath(log: RoundRecordsLog) extends RecordsLogPath(log) {

  override def polled(
      round: SlotRound,
      records: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Iterator[InternalRow] = {
    val (partition, slot) = (round.partition, round.slot)
    val budget = partition.afterLog.getOrElse(throw new IllegalStateException(
      s"slot ${partition.slot}, round ${partition.round}: planned without an after-log budget"
    ))
    val pollingEnds = System.nanoTime() + MILLISECONDS.toNanos(budget.pollingMs)

    /** Logs and ACCEPTs `polled` as `part`, and polls the next part: whether every part this attempt polled is the batch's. */
    @tailrec
    def logParts(polled: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]], part: Int, taken: Long): Boolean =
      if (polled.isEmpty) endsAt(round, part)
      else {
        val kept = dropDelivered(round, polled)
        val logged = loggedRecords(round, kept)
        if (
          logged.nonEmpty && log.writeFirst(partition.round, partition.slot, logged, fence(partition), part).nonEmpty
        ) {
          false
        } else {
          if (logged.nonEmpty) {
            val others = loggedFirstElsewhere(partition, part, logged)
            round.counts.add(_.deduplicated, others.size)
            if (others.nonEmpty) slot.hide(partition.round, others)
            round.counts.add(_.accepted, slot.acceptLogged(partition.round, ShareConsumerPool.CloseTimeout))
          }
          val (next, total) = if (logged.isEmpty) (part, taken) else (part + 1, taken + logged.size)
          if (total >= budget.records || System.nanoTime() >= pollingEnds) endsAt(round, next)
          else logParts(round.acquired(slot.pollPart(partition.round, budget.partPoll)), next, total)
        }
      }

    if (logParts(records, 0, 0)) round.rows(slot.heldFor(partition.round).getOrElse(java.util.List.of()))
    else readBackInstead(round, batch(partition, log.seal(partition.round, partition.slot, fence(partition))))
  }

  override def heldAgain(
      round: SlotRound,
      held: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Iterator[InternalRow] = {
    val logged = batch(round.partition, log.seal(round.partition.round, round.partition.slot, fence(round.partition)))
    if (logged.map(_.coordinates).toSet == held.asScala.map(RecordCoordinates.of).toSet) round.rows(held)
    else readBackInstead(round, logged)
  }

  /** Where the slot logged a part of the round: its records, once no attempt can add a part. */
  override def readElsewhere(partition: KafkaShareInputPartition): Option[Seq[LoggedRecord]] =
    log.readPart(partition.round, partition.slot, 0)
      .map(_ => batch(partition, log.seal(partition.round, partition.slot, fence(partition))))

  /** Ends the slot's round with an empty `part`: whether the parts before it are this attempt's. */
  private def endsAt(round: SlotRound, part: Int): Boolean =
    log.writeFirst(round.partition.round, round.partition.slot, Nil, fence(round.partition), part).forall(_.isEmpty)

  /** The records the slot's `parts` hand to the batch. */
  private def batch(partition: KafkaShareInputPartition, parts: Seq[Seq[LoggedRecord]]): Seq[LoggedRecord] =
    parts.zipWithIndex.flatMap { case (records, part) =>
      val others = loggedFirstElsewhere(partition, part, records)
      records.filterNot(r => others.contains(r.coordinates))
    }
}
