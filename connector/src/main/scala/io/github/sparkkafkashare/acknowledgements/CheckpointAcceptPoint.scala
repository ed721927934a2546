package io.github.sparkkafkashare.acknowledgements

import java.io.FileNotFoundException
import java.nio.charset.StandardCharsets.UTF_8

import com.fasterxml.jackson.databind.ObjectMapper
import io.github.sparkkafkashare.errors.KafkaShareErrors
import io.github.sparkkafkashare.options.{AcceptPoint, ExactlyOnceStrategy}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

/**
 * The accept point (`kafka.share.acknowledge`) under which the checkpoint's batches that may run again
 * ran, kept in `<checkpoint>/sources/<n>/kafka-share-accept-point.json`. Under `after-log` a batch's
 * records are ACCEPTed once logged, so a batch that never committed keeps its records only if its
 * re-run reads them back from the records log: a run of that checkpoint under a strategy that does
 * not re-run batches from the log is refused as it starts ([[KafkaShareErrors.checkpointNeedsReplay]]).
 *
 * The file changes to a run's own accept point once the run commits a batch ([[committed]]): every
 * batch up to it is then committed, a re-run one among them.
 *
 * @param dir the source's checkpoint directory (`<checkpoint>/sources/<n>`)
 */
private[sparkkafkashare] final class CheckpointAcceptPoint(
    dir: String,
    hadoopConf: Configuration,
    point: AcceptPoint,
    strategy: ExactlyOnceStrategy
) {
  import CheckpointAcceptPoint._

  private val file = new Path(dir, FileName)
  private val fs = file.getFileSystem(hadoopConf)
  private val files = new LogFiles(fs, file.getParent)

  /** The accept point of the batches that may run again: the last run's, until this run commits one. */
  @volatile private var ranUnder: AcceptPoint = read().getOrElse { write(point); point }

  if (ranUnder == AcceptPoint.AfterLog && !strategy.replaysLoggedRecords) {
    throw KafkaShareErrors.checkpointNeedsReplay(dir, strategy.name)
  }

  /** Whether a batch run again ran under `after-log`: some of its records may be ACCEPTed already. */
  def reRunsAfterLog: Boolean = ranUnder == AcceptPoint.AfterLog

  /** This run committed a batch: every batch that may run again from now on runs under its accept point. */
  def committed(): Unit = if (ranUnder != point) {
    write(point)
    ranUnder = point
  }

  private def read(): Option[AcceptPoint] =
    try {
      val in = fs.open(file)
      val json =
        try new String(in.readAllBytes(), UTF_8)
        finally in.close()
      val name = Option(mapper.readTree(json).get(AcknowledgeField)).map(_.asText())
      Some(AcceptPoint.all.find(p => name.contains(p.name)).getOrElse(throw new IllegalStateException(
        s"Unreadable $file: no known '$AcknowledgeField' in $json"
      )))
    } catch { case _: FileNotFoundException => None }

  private def write(p: AcceptPoint): Unit =
    files.replace(file, mapper.writeValueAsString(java.util.Map.of(AcknowledgeField, p.name)).getBytes(UTF_8))
}

private[sparkkafkashare] object CheckpointAcceptPoint {
  val FileName = "kafka-share-accept-point.json"
  private val AcknowledgeField = "acknowledge"
  private val mapper = new ObjectMapper()
}
