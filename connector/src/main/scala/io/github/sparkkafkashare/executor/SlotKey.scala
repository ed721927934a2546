package io.github.sparkkafkashare.executor

/** Identifies the share consumer of one slot of one query run. */
private[sparkkafkashare] final case class SlotKey(runId: String, slot: Int)

/** How a settlement acknowledged the records it found held. */
private[sparkkafkashare] final case class Settlement(accepted: Int, released: Int, rejected: Int)
