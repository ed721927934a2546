package io.github.sparkkafkashare.runs

/**
 * The acknowledgements user code chose, in explicit mode, for records of one committed round, in
 * plain types for Spark's RPC: AcknowledgeType names by (topic, partition, offset).
 */
final case class RoundMarks(round: Long, marks: Map[(String, Int, Long), String])
