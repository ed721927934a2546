package io.github.sparkkafkashare.runs

/**
 * What an executor learns from the driver about a running query run. Public: the driver's registry
 * of runs, which sits in Spark's package for Spark's RPC, answers with it.
 *
 * @param committedThrough every round up to this one is committed
 * @param homes            per slot, the executor whose consumer last read it
 */
final case class RunState(committedThrough: Long, homes: Map[Int, String])
