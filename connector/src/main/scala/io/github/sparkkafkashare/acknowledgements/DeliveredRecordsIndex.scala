package io.github.sparkkafkashare.acknowledgements

/**
 * An executor's view of the log, to drop redeliveries of records that an earlier round handed to
 * Spark, unless user code RELEASEd them from that round's batch (explicit mode: it asked for them
 * again), and to find what other slots logged for a slot's own round.
 *
 * Spark plans a round only once the one before it committed, and a round's files are all written
 * before its batch commits (a late attempt's write is fenced), so the rounds before a round no longer
 * change but for the driver's pruning, which deletes only records Kafka never delivers again. So the
 * first check for a round lists the log and reads the rounds not read yet; the round's later checks
 * (its other slots on this executor, its other parts under `after-log`) list nothing. Rounds pruned
 * from the log are forgotten at the next listing. A part's file never changes once written, so the
 * parts this JVM wrote or read are not read again.
 */
private[sparkkafkashare] final class DeliveredRecordsIndex(log: RoundRecordsLog) {
  import DeliveredRecordsIndex.{ByCoordinates, byCoordinates, loggedIn}

  private var byRound = Map.empty[Long, ByCoordinates]

  /** The round whose earlier rounds `byRound` holds, each whole. */
  private var listedFor: Option[Long] = None

  /** The parts of rounds not in `byRound` that this JVM wrote or read, by (round, slot, part). */
  private val knownParts = new java.util.concurrent.ConcurrentHashMap[(Long, Int, Int), Seq[LoggedRecord]]()

  /** The slot's `part` of `round` holds `records`: its file was written so, by this JVM or another. */
  def logged(round: Long, slot: Int, part: Int, records: Seq[LoggedRecord]): Unit =
    knownParts.put((round, slot, part), records)

  /** The records of one part of a round, if it was written. */
  private def partRecords(round: Long, slot: Int, part: Int): Option[Seq[LoggedRecord]] =
    Option(knownParts.get((round, slot, part))).orElse {
      val read = log.readPart(round, slot, part)
      read.foreach(logged(round, slot, part, _))
      read
    }

  /** Those of `candidates` (polled records, as the round would log them) that a round before `round` handed to Spark. */
  def deliveredBefore(round: Long, candidates: Seq[LoggedRecord]): Set[RecordCoordinates] =
    if (candidates.isEmpty) Set.empty else loggedIn(handedToSparkBefore(round), candidates)

  /**
   * Those of `candidates` that the given `parts`, as (slot, part), logged for `round`. A part's file
   * never changes once written, so each is read once: under `after-log` every part of a round asks
   * about the parts before it, and reading them all again each time would cost the square of a
   * round's parts.
   */
  def loggedBy(round: Long, parts: Seq[(Int, Int)], candidates: Seq[LoggedRecord]): Set[RecordCoordinates] =
    if (candidates.isEmpty || parts.isEmpty) Set.empty
    else partsOf(round).loggedBy(parts, candidates)

  /** The index of `round`'s parts; those of rounds before the one before it are forgotten. */
  private def partsOf(round: Long): RoundParts = synchronized {
    byRoundParts = byRoundParts.filter { case (r, _) => r >= round - 1 }
    byRoundParts.getOrElse(round, { val parts = new RoundParts(round); byRoundParts += round -> parts; parts })
  }
  private var byRoundParts = Map.empty[Long, RoundParts]

  /** The records of a round's parts read so far, by coordinates, each with the part that logged it. */
  private final class RoundParts(round: Long) {
    private val read = scala.collection.mutable.Set.empty[(Int, Int)]
    private val byCoordinates =
      scala.collection.mutable.HashMap.empty[RecordCoordinates, List[(LoggedRecord, (Int, Int))]]

    def loggedBy(parts: Seq[(Int, Int)], candidates: Seq[LoggedRecord]): Set[RecordCoordinates] = synchronized {
      parts.filterNot(read.contains).foreach { case p @ (slot, part) =>
        partRecords(round, slot, part).foreach { records =>
          records.foreach(r => byCoordinates(r.coordinates) = (r, p) :: byCoordinates.getOrElse(r.coordinates, Nil))
          read += p
        }
      }
      val asked = parts.toSet
      candidates.filter { c =>
        byCoordinates.getOrElse(c.coordinates, Nil).exists { case (r, p) => asked.contains(p) && r.sameAs(c) }
      }.map(_.coordinates).toSet
    }
  }

  private def handedToSparkBefore(round: Long): Iterable[ByCoordinates] = synchronized {
    if (listedFor.forall(_ < round)) {
      val earlier = log.roundNumbers().filter(_ < round)
      // A round's released file is written before its batch commits, so before any later round reads it.
      def handedToSpark(round: Long, files: RoundFiles): ByCoordinates = {
        val released = files.released.toSeq.flatMap(log.readFile).map(_.coordinates).toSet
        val records = files.slots.values.flatten.flatMap { file =>
          RoundRecordsLog.slotAndPart(file.getPath.getName)
            .flatMap { case (slot, part) => Option(knownParts.get((round, slot, part))) }
            .getOrElse(log.readFile(file))
        }
        byCoordinates(records.filterNot(r => released.contains(r.coordinates)))
      }
      byRound = byRound.filter { case (r, _) => earlier.contains(r) } ++
        (earlier -- byRound.keySet).map(r => r -> handedToSpark(r, log.filesOf(r)))
      knownParts.keySet().removeIf(_._1 < round)
      listedFor = Some(round)
    }
    byRound.collect { case (r, records) if r < round => records }
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
