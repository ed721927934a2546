package io.github.sparkkafkashare

import java.util.Locale

import io.github.sparkkafkashare.acknowledgements.{DeadLetters, RecordCoordinates}
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.executor.{KafkaShareInputPartition, KafkaShareReplayPartition}
import io.github.sparkkafkashare.options.{AcknowledgmentMode, KafkaShareSourceOptions}
import io.github.sparkkafkashare.planning.KafkaShareMicroBatchStream
import org.apache.kafka.clients.consumer.AcknowledgeType
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.functions.{broadcast, col, upper}
import org.apache.spark.sql.kafkashare.{ClassicSparkApi, ScanPartitions}
import org.apache.spark.sql.types.{IntegerType, LongType, StringType}

/**
 * Explicit acknowledgement (`kafka.share.acknowledgment.mode=explicit`): inside `foreachBatch`,
 * user code chooses per record whether the share group should consider it done (ACCEPT), deliver
 * it again (RELEASE, its `deliveryCount` goes up) or never deliver it again (REJECT):
 * {{{
 *   query.writeStream.foreachBatch { (batch: DataFrame, batchId: Long) =>
 *     val failed = process(batch) // a DataFrame of the records that could not be processed
 *     KafkaShareAcknowledgements.acknowledge(batch,
 *       failed.select($"topic", $"partition", $"offset", lit("release").as("acknowledgement")))
 *   }
 * }}}
 * The marks take effect when Spark commits the batch, at the consumer that holds the records; if
 * the batch fails instead, every record of it is released. Records left unmarked are ACCEPTed.
 * The Python package calls [[acknowledge]] over Py4J.
 */
object KafkaShareAcknowledgements {
  val Columns: Seq[String] = Seq("topic", "partition", "offset", "acknowledgement")
  private val types = Map(
    "ACCEPT" -> AcknowledgeType.ACCEPT,
    "RELEASE" -> AcknowledgeType.RELEASE,
    "REJECT" -> AcknowledgeType.REJECT
  )

  /**
   * Records `marks` (columns `topic`, `partition`, `offset`, `acknowledgement`: one of `accept`,
   * `release`, `reject`) for the records of `batch`, the DataFrame foreachBatch received. Marking
   * a record twice keeps the later mark. Only the marks are collected to the driver, so mark the
   * exceptions and let the rest default to ACCEPT.
   */
  def acknowledge(batch: DataFrame, marks: DataFrame): Unit = {
    val (stream, round) = explicitBatch(batch)
    requireColumns(marks, Columns, KafkaShareErrors.invalidMarks)

    val rows = marks.select(coordinates :+ upper(col("acknowledgement")).as("acknowledgement"): _*).collect()
    val parsed = rows.map { row =>
      if ((0 until 4).exists(row.isNullAt)) throw KafkaShareErrors.invalidMarks(s"a mark has a null field: $row")
      val ackType = types.getOrElse(
        row.getString(3),
        throw KafkaShareErrors.invalidMarks(
          s"acknowledgement '${row.getString(3).toLowerCase(Locale.ROOT)}' of record ${describe(row)} is not one of " +
            types.keys.map(_.toLowerCase(Locale.ROOT)).mkString(", ")
        )
      )
      coordinatesOf(row) -> ackType
    }
    if (parsed.nonEmpty) {
      checkInBatch(batch, marks, parsed.map(_._1).distinct.length)
      stream.recordMarks(round, parsed.toMap)
    }
  }

  /**
   * Poison records: the records of `batch` in `failed` (which needs the source's columns) could not
   * be processed. Those delivered fewer than `maxDeliveries` times are RELEASEd, so the group
   * delivers them again; the others are copied to `deadLetterTopic` (when given) and REJECTed, so
   * they stop coming back. Copies keep key, value and headers, and add headers
   * `kafka-share.origin` (`topic-partition@offset`) and `kafka-share.delivery-count`.
   * With option `kafka.share.dead.letter.topic` the broker writes the REJECTed records to the
   * group's dead-letter topic instead, so `deadLetterTopic` must then be null or empty.
   * Returns how many records were sent to the dead-letter topic or rejected.
   */
  def releaseOrDeadLetter(batch: DataFrame, failed: DataFrame, maxDeliveries: Int, deadLetterTopic: String): Long = {
    if (maxDeliveries < 1)
      throw KafkaShareErrors.invalidDeadLetterInput(s"maxDeliveries must be at least 1, not $maxDeliveries")
    val (stream, round) = explicitBatch(batch)
    val deadLetters = Option(deadLetterTopic).filter(_.nonEmpty)
    for (topic <- deadLetters; broker <- stream.options.brokerDeadLetters) {
      throw KafkaShareErrors.deadLetterTopicTwice(topic, KafkaShareSourceOptions.DeadLetterTopic, broker.topic)
    }
    val needed = Columns.take(3) ++ Seq("deliveryCount") ++ deadLetters.map(_ => Seq("key", "value")).getOrElse(Nil)
    requireColumns(failed, needed, KafkaShareErrors.invalidDeadLetterInput)
    val exhausted = col("deliveryCount") >= maxDeliveries
    val retried = failed.filter(!exhausted).select(coordinates: _*).collect()
      .map(r => coordinatesOf(r) -> AcknowledgeType.RELEASE)
    val poison = failed.filter(exhausted).collect()
    val rejected =
      poison.map(r =>
        RecordCoordinates(
          r.getAs[String]("topic"),
          r.getAs[Int]("partition"),
          r.getAs[Long]("offset")
        ) -> AcknowledgeType.REJECT
      )
    val marked = retried ++ rejected
    if (marked.nonEmpty) {
      checkInBatch(batch, failed, marked.map(_._1).distinct.length)
      deadLetters.foreach(topic => DeadLetters.send(stream.options.connection, topic, poison.toSeq))
      stream.recordMarks(round, marked.toMap)
    }
    rejected.length.toLong
  }

  private val coordinates =
    Seq(col("topic").cast(StringType), col("partition").cast(IntegerType), col("offset").cast(LongType))

  /** A row that starts with the `coordinates` columns. */
  private def coordinatesOf(row: Row): RecordCoordinates =
    RecordCoordinates(row.getString(0), row.getInt(1), row.getLong(2))

  private def describe(row: Row): String = s"${row.getString(0)}-${row.getInt(1)}@${row.getLong(2)}"

  private def requireColumns(df: DataFrame, needed: Seq[String], error: String => Throwable): Unit = {
    val missing = needed.filterNot(c => df.columns.exists(_.equalsIgnoreCase(c)))
    if (missing.nonEmpty) throw error(s"missing column(s) ${missing.mkString(", ")}")
  }

  /** The stream and round of `batch`, which must come from a kafka-share source in explicit mode. */
  private def explicitBatch(batch: DataFrame): (KafkaShareMicroBatchStream, Long) = {
    val (stream, round) = shareBatch(batch)
    if (stream.options.acknowledgmentMode != AcknowledgmentMode.Explicit) {
      throw KafkaShareErrors.acknowledgeNeedsExplicitMode(KafkaShareSourceOptions.AcknowledgmentModeOption)
    }
    (stream, round)
  }

  /** Fails unless every record `marks` names is in `batch`. */
  private def checkInBatch(batch: DataFrame, marks: DataFrame, distinctMarks: Int): Unit = {
    // Marks are few, so they are broadcast and the batch is scanned once, without a shuffle.
    val keys = Seq("topic", "partition", "offset")
    val marked = marks.select(coordinates: _*).distinct()
    val inBatch = batch.select(coordinates: _*).join(broadcast(marked), keys, "left_semi").count()
    if (inBatch < distinctMarks) {
      val notInBatch = marked.join(batch.select(coordinates: _*), keys, "left_anti").limit(5).collect()
      throw KafkaShareErrors.marksOutsideBatch(notInBatch.toSeq.map(describe))
    }
  }

  /**
   * The kafka-share stream that produced `batch`, and the round the batch read. foreachBatch hands
   * over the batch as an already planned RDD, so the batch's input partitions are found in its
   * lineage; they name the query run, whose stream is registered while it runs.
   */
  private def shareBatch(batch: DataFrame): (KafkaShareMicroBatchStream, Long) = {
    val runsAndRounds = ClassicSparkApi.queryExecution(batch).map(q => shareRounds(q.toRdd).distinct).getOrElse(Nil)
    runsAndRounds match {
      case Seq((runId, round)) =>
        (KafkaShareMicroBatchStream.running(runId).getOrElse(throw KafkaShareErrors.notAShareBatch(0)), round)
      case other => throw KafkaShareErrors.notAShareBatch(other.map(_._1).distinct.size)
    }
  }

  /** The (run, round) of each kafka-share input partition in `rdd`'s lineage: a round's tasks, or a re-run batch's read-back. */
  private def shareRounds(rdd: RDD[_]): Seq[(String, Long)] = {
    val own = rdd.partitions.toSeq.flatMap(ScanPartitions.read).collect {
      case k: KafkaShareInputPartition => (k.runId, k.round)
      case k: KafkaShareReplayPartition => (k.runId, k.round)
    }
    own ++ rdd.dependencies.flatMap(d => shareRounds(d.rdd))
  }
}
