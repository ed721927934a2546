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
    val budget = round.partition.afterLog.getOrElse(throw new IllegalStateException(
      s"slot ${round.partition.slot}, round ${round.partition.round}: planned without an after-log budget"
    ))
    new Parts(round, records, budget)
  }

  /**
   * The rows of a slot's round, part by part: the next part is polled once the rows of the last one
   * are read, so a consumer whose rows take longer polls less, and the records spread over the
   * consumers as each keeps up. Every part is logged and ACCEPTed before its rows are handed out.
   */
  private final class Parts(
      round: SlotRound,
      first: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]],
      budget: AfterLogBudget
  ) extends Iterator[InternalRow] {
    private val (partition, slot) = (round.partition, round.slot)
    private val pollingEnds = System.nanoTime() + MILLISECONDS.toNanos(budget.pollingMs)
    private var part = 0
    private var taken = 0L
    private var polled: Option[java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]] = Some(first)
    private var ended = false
    private var rows: Iterator[InternalRow] = Iterator.empty

    override def hasNext: Boolean = rows.hasNext || { advance(); rows.hasNext }

    override def next(): InternalRow = if (hasNext) rows.next() else throw new NoSuchElementException

    /** Takes the round's next part that has rows to hand out, unless the round ends first. */
    @tailrec
    private def advance(): Unit = if (!ended) {
      val records = polled.getOrElse {
        if (taken >= budget.records || System.nanoTime() >= pollingEnds) AfterLogPath.NoRecords
        else round.acquired(round.counts.timed(_.pollNanos)(slot.pollPart(partition.round, budget.partPoll)))
      }
      polled = None
      if (records.isEmpty) {
        ended = true
        if (!round.inRecordsLog(endsAt(round, part))) rows = loggedFrom(part)
      } else {
        val kept = dropDelivered(round, records)
        val logged = loggedRecords(round, kept)
        if (logged.isEmpty) advance()
        else if (round.inRecordsLog(logFirst(partition, logged, part)).nonEmpty) {
          ended = true
          rows = loggedFrom(part)
        } else {
          val others = round.inRecordsLog(loggedFirstElsewhere(partition, part, logged))
          round.counts.add(_.deduplicated, others.size)
          if (others.nonEmpty) slot.hide(partition.round, others)
          round.acknowledging(slot.acceptLogged(partition.round, ShareConsumerPool.CloseTimeout))
          part += 1
          taken += logged.size
          rows = round.rows(kept.asScala.filterNot(r => others.contains(RecordCoordinates.of(r))).asJava)
          if (!rows.hasNext) advance()
        }
      }
    }

    /**
     * Another attempt logged the round's part `from` first: the rows of its parts from there on, read
     * back by their coordinates, once the round is sealed. What this attempt polled for the part was
     * never ACCEPTed, and is RELEASEd; its earlier parts' rows are handed out already.
     */
    private def loggedFrom(from: Int): Iterator[InternalRow] =
      readBackInstead(
        round,
        round.inRecordsLog(batch(partition, log.seal(partition.round, partition.slot, fence(partition)), from))
      )
  }

  /**
   * The round as sealed. If it is what the slot holds, the held rows, once the part the slot polled
   * last is ACCEPTed: an attempt can fail after that part's write and before its ACCEPT, and the
   * round hands no record to Spark unACCEPTed (at settlement it RELEASEs what it still holds).
   */
  override def heldAgain(
      round: SlotRound,
      held: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]]
  ): Iterator[InternalRow] = {
    val (partition, slot) = (round.partition, round.slot)
    val logged = round.inRecordsLog(batch(partition, log.seal(partition.round, partition.slot, fence(partition))))
    if (logged.map(_.coordinates).toSet == held.asScala.map(RecordCoordinates.of).toSet) {
      if (slot.heldCount(partition.round) > 0) {
        round.acknowledging(slot.acceptLogged(partition.round, ShareConsumerPool.CloseTimeout))
      }
      round.rows(held)
    } else readBackInstead(round, logged)
  }

  /** Where the slot logged a part of the round: its records, once no attempt can add a part. */
  override def readElsewhere(partition: KafkaShareInputPartition): Option[Seq[LoggedRecord]] =
    log.readPart(partition.round, partition.slot, 0)
      .map(_ => batch(partition, log.seal(partition.round, partition.slot, fence(partition))))

  /** Ends the slot's round with an empty `part`: whether the parts before it are this attempt's. */
  private def endsAt(round: SlotRound, part: Int): Boolean =
    log.writeFirst(round.partition.round, round.partition.slot, Nil, fence(round.partition), part).forall(_.isEmpty)

  /** The records the slot's `parts`, from part `from` on, hand to the batch. */
  private def batch(
      partition: KafkaShareInputPartition,
      parts: Seq[Seq[LoggedRecord]],
      from: Int = 0
  ): Seq[LoggedRecord] =
    parts.zipWithIndex.drop(from).flatMap { case (records, part) =>
      val others = loggedFirstElsewhere(partition, part, records)
      records.filterNot(r => others.contains(r.coordinates))
    }
}

private[executor] object AfterLogPath {
  private val NoRecords: java.util.List[ConsumerRecord[Array[Byte], Array[Byte]]] = java.util.List.of()
}
