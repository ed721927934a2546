package org.apache.spark.sql.kafkashare

import java.util.concurrent.{ConcurrentHashMap, TimeoutException}

import scala.concurrent.duration._
import scala.util.control.NonFatal

import io.github.sparkkafkashare.runs.{RoundMarks, RunLookUp, RunState}
import org.apache.spark.SparkEnv
import org.apache.spark.internal.Logging
import org.apache.spark.rpc.{RpcCallContext, RpcEndpointRef, RpcEnv, RpcTimeout, ThreadSafeRpcEndpoint}
import org.apache.spark.util.RpcUtils

/**
 * The query runs of this application, kept by the driver and asked by executors over Spark's RPC
 * (Spark-internal API, hence this package; Spark's state store coordinator works the same way).
 * An executor's janitor uses it to settle consumers that no task of their query comes back to:
 * without it, such a consumer could only guess whether its query still runs and what it committed.
 */
object QueryRunRegistry extends Logging {

  private val EndpointName = "KafkaShareQueryRuns"

  /** An executor that cannot get an answer in this time takes the run as unanswered ([[RunLookUp.Unanswered]]). */
  private val AskTimeout = new RpcTimeout(10.seconds, "kafka-share query run lookup")

  // Messages and replies are of JDK and Scala types only: the RPC layer deserializes them with Spark's
  // own class loader, which does not see the connector's jar (a class of ours there kills the executor).
  private val LookUp = "kafka-share-look-up"
  private val CountedOutsideTasks = "kafka-share-counted-outside-tasks"
  private val Logged = "kafka-share-logged"
  private val StoppedReply = "stopped"
  private val NoMarks = RoundMarks(-1L, Map.empty)

  /** How many stopped runs the driver remembers, the latest ones: an application may start queries for days. */
  val StoppedRunsKept = 1000

  /**
   * How many of those keep their last round's marks, the latest ones: marks can number a batch's
   * records. A missed consumer's janitor asks within seconds of the stop; one that asks about an
   * older run RELEASEs that round instead (its records come again, nothing is lost).
   */
  val StoppedRunsWithMarks = 10

  private final class Endpoint(override val rpcEnv: RpcEnv) extends ThreadSafeRpcEndpoint {
    val runs = new ConcurrentHashMap[String, RunState]()

    /** Per run, counts by metric name. */
    val countedOutsideTasks = new ConcurrentHashMap[String, Map[String, Long]]()

    /** Stopped runs, oldest first, with their last state and the marks of its committed round. */
    val stopped = new java.util.LinkedHashMap[String, (RunState, RoundMarks)]()

    /**
     * Per running run, for each round not yet committed: the slots' parts that logged it, as (slot,
     * part), in the order they said so.
     */
    val logOrder = new ConcurrentHashMap[String, Map[Long, Vector[(Int, Int)]]]()

    override def receive: PartialFunction[Any, Unit] = {
      case (CountedOutsideTasks, runId: String, counts: Map[String, Long] @unchecked) =>
        countedOutsideTasks.computeIfPresent(
          runId,
          (_, sums) =>
            counts.foldLeft(sums) { case (s, (name, n)) => s.updated(name, s.getOrElse(name, 0L) + n) }
        )
    }

    override def receiveAndReply(context: RpcCallContext): PartialFunction[Any, Unit] = {
      case (LookUp, runId: String) =>
        val running = Option(runs.get(runId)).map(state => (state.committedThrough, state.homes))
        context.reply(running.orElse(stopped.synchronized(Option(stopped.get(runId))).map { case (last, marks) =>
          (StoppedReply, last.committedThrough, last.homes, marks.round, marks.marks)
        }))
      case (Logged, runId: String, round: Long, slot: Int, part: Int) =>
        val running = Option(runs.get(runId)).filter(round > _.committedThrough)
        context.reply(running.map { _ =>
          val order = logOrder.compute(
            runId,
            (_, byRound) => {
              val rounds = Option(byRound).getOrElse(Map.empty[Long, Vector[(Int, Int)]])
              val parts = rounds.getOrElse(round, Vector.empty)
              if (parts.contains(slot -> part)) rounds else rounds.updated(round, parts :+ (slot -> part))
            }
          )(round)
          order.takeWhile(_ != (slot -> part))
        })
    }
  }

  /** The driver's endpoint, per SparkEnv: a JVM may run several SparkContexts one after another. */
  private var driverEndpoint: Option[(SparkEnv, Endpoint)] = None
  @volatile private var driverRef: Option[(SparkEnv, RpcEndpointRef)] = None

  private def endpoint(): Endpoint = synchronized {
    val env = SparkEnv.get
    driverEndpoint.collect { case (e, endpoint) if e eq env => endpoint }.getOrElse {
      val endpoint = new Endpoint(env.rpcEnv)
      try env.rpcEnv.setupEndpoint(EndpointName, endpoint)
      catch {
        // Another copy of the connector, in a class loader of its own, registered first. Executors then
        // find our runs unknown, and fall back to the idle timeout alone.
        case e: IllegalArgumentException =>
          logWarning(s"Executors cannot ask this driver about kafka-share query runs: ${e.getMessage}")
      }
      driverEndpoint = Some(env -> endpoint)
      endpoint
    }
  }

  /** Driver: the run's current state, replacing the last one. */
  def publish(runId: String, state: RunState): Unit = {
    val registry = endpoint()
    registry.countedOutsideTasks.putIfAbsent(runId, Map.empty)
    registry.runs.put(runId, state)
    registry.logOrder.computeIfPresent(runId, (_, byRound) => byRound.filter(_._1 > state.committedThrough))
  }

  /**
   * Driver: the run stopped, and its closing job has run; executors' janitors settle and close what
   * that job missed, as it would have: by the run's last state and the marks of its last committed round.
   */
  def markStopped(runId: String, last: RunState, marks: RoundMarks): Unit = {
    val registry = endpoint()
    registry.stopped.synchronized {
      registry.stopped.put(runId, (last, marks))
      if (registry.stopped.size > StoppedRunsKept) registry.stopped.remove(registry.stopped.keySet().iterator().next())
      // Older runs give up their marks: their janitors RELEASE that round.
      val older = registry.stopped.entrySet().iterator()
      (0 until registry.stopped.size - StoppedRunsWithMarks).foreach { _ =>
        val entry = older.next()
        val (state, kept) = entry.getValue
        if (kept.marks.nonEmpty) {
          entry.setValue((state.copy(committedThrough = math.min(state.committedThrough, kept.round - 1)), NoMarks))
        }
      }
    }
    registry.runs.remove(runId)
    registry.countedOutsideTasks.remove(runId)
    registry.logOrder.remove(runId)
  }

  /** Driver: what executors' janitors counted for the run outside its tasks, by metric name. */
  def countedOutsideTasks(runId: String): Map[String, Long] =
    Option(endpoint().countedOutsideTasks.get(runId)).getOrElse(Map.empty)

  /** Anywhere: what the driver knows of the run: its state as last published, or that it stopped. */
  def lookUp(runId: String): RunLookUp =
    try {
      driver().askSync[Any]((LookUp, runId), AskTimeout) match {
        case Some((committedThrough: Long, homes: Map[Int, String] @unchecked)) =>
          RunLookUp.Running(RunState(committedThrough, homes))
        case Some((
              StoppedReply,
              committedThrough: Long,
              homes: Map[Int, String] @unchecked,
              round: Long,
              marks: Map[(String, Int, Long), String] @unchecked
            )) =>
          RunLookUp.Stopped(RunState(committedThrough, homes), RoundMarks(round, marks))
        case _ => RunLookUp.Unknown
      }
    } catch {
      case NonFatal(e) =>
        logWarning(s"Could not ask the driver about query run $runId: ${e.getMessage}")
        RunLookUp.Unanswered
    }

  /**
   * Anywhere: tells the driver that `slot` logged `part` of its records of `round` (its file is in the
   * records log), and returns the parts, as (slot, part), that said so before it, in order; the same
   * answer each time a part is told. Their files name every record they hand to the batch, so a record
   * that this part's file names too is theirs. None when the run is not running, has committed the
   * round, or is not this driver's to order (another copy of the connector answers). Throws if the
   * driver does not answer in time.
   */
  def loggedBefore(runId: String, round: Long, slot: Int, part: Int): Option[Seq[(Int, Int)]] =
    try driver().askSync[Option[Seq[(Int, Int)]]]((Logged, runId, round, slot, part), AskTimeout)
    catch {
      case e: TimeoutException => throw e // Spark's RpcTimeoutException, private to its package in 3.5
      case NonFatal(e) =>
        logWarning(s"The driver cannot order the records logs of query run $runId: ${e.getMessage}")
        None
    }

  /**
   * Anywhere: tells the driver what a janitor did for the run outside its tasks (records released,
   * acknowledgements that failed), by metric name, for its metrics.
   */
  def reportCountedOutsideTasks(runId: String, counts: Map[String, Long]): Unit =
    try driver().send((CountedOutsideTasks, runId, counts))
    catch {
      case NonFatal(e) => logWarning(s"Could not tell the driver about ${counts.mkString(", ")}: ${e.getMessage}")
    }

  private def driver(): RpcEndpointRef = {
    val env = SparkEnv.get
    driverRef.collect { case (e, ref) if e eq env => ref }.getOrElse {
      val ref = RpcUtils.makeDriverRef(EndpointName, env.conf, env.rpcEnv)
      driverRef = Some(env -> ref)
      ref
    }
  }
}
