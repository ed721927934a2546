package io.github.sparkkafkashare.acknowledgements

/** Which of a slot's polled records the log says were handed to Spark already. */
private[sparkkafkashare] final case class HandedOver(
    byEarlierRounds: Set[RecordCoordinates],
    byOtherSlotsThisRound: Set[RecordCoordinates])
/**
 * An executor's view of the log, to drop redeliveries of records that an earlier round (or another
 * slot in the same round) already handed to Spark, unless user code RELEASEd them from that round's
 * batch (explicit mode: it asked for them again). Each check lists the log once; it reads the
 * earlier rounds it has not read yet (rounds already read are kept, and forgotten once pruned from
 * the log) and, afresh, the other slots' files of the slot's own round, which are still being written.
 */
private[sparkkafkashare] final class DeliveredRecordsIndex(log: RoundRecordsLog) {
  import DeliveredRecordsIndex.{ByCoordinates, byCoordinates, loggedIn}

  private var byRound = Map.empty[Long, ByCoordinates]

  /**
   * Those of `candidates` (polled records, as the round would log them) that a round before `round`
   * handed to Spark, and, of the rest, those that another slot logged for `round` itself: an executor
   * died with them, the broker gave them to this slot, and the other slot's retry reads them back from
   * its log.
   */
  def handedOver(round: Long, slot: Int, candidates: Seq[LoggedRecord]): HandedOver =
    if (candidates.isEmpty) HandedOver(Set.empty, Set.empty)
    else {
      val files = log.rounds()
      val earlier = loggedIn(deliveredBefore(round, files), candidates)
      val others = byCoordinates(files.get(round).toSeq.flatMap(_.slots.collect {
        case (other, file) if other != slot => log.readFile(file)
      }).flatten)
      HandedOver(earlier, loggedIn(Seq(others), candidates) -- earlier)
    }

  private def deliveredBefore(round: Long, files: Map[Long, RoundFiles]): Iterable[ByCoordinates] = synchronized {
    val logged = files.filter(_._1 < round)
    // A round's released file is written before its batch commits, so before any later round reads it.
    def handedToSpark(round: RoundFiles): ByCoordinates = {
      val released = round.released.toSeq.flatMap(log.readFile).map(_.coordinates).toSet
      byCoordinates(round.slots.values.flatMap(log.readFile).filterNot(r => released.contains(r.coordinates)))
    }
    byRound = byRound.filter { case (r, _) => logged.contains(r) } ++ logged.collect {
      case (r, files) if !byRound.contains(r) => r -> handedToSpark(files)
    }
    byRound.values
  }
}
private[sparkkafkashare] object DeliveredRecordsIndex {
  /** Logged records by their coordinates (records of a topic made again can share them). */
  private type ByCoordinates = Map[RecordCoordinates, Seq[LoggedRecord]]

  private def byCoordinates(records: Iterable[LoggedRecord]): ByCoordinates = records.toSeq.groupBy(_.coordinates)

  /** The coordinates of those `candidates` that one of the `logged` records is the same record as. */
  private def loggedIn(logged: Iterable[ByCoordinates], candidates: Seq[LoggedRecord]): Set[RecordCoordinates] =
    candidates.filter(c => logged.exists(_.getOrElse(c.coordinates, Nil).exists(_.sameAs(c)))).map(_.coordinates).toSet

  private val byRun = new java.util.concurrent.ConcurrentHashMap[String, DeliveredRecordsIndex]()

  /** This JVM's index for a query run. */
  def forRun(runId: String, log: RoundRecordsLog): DeliveredRecordsIndex =
    byRun.computeIfAbsent(runId, _ => new DeliveredRecordsIndex(log))

  def forget(runId: String): Unit = byRun.remove(runId)
}
