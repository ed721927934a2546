package io.github.sparkkafkashare.executor

/**
 * Every edge of a slot's protocol, as (transition, from, to) by state name: the one list of which
 * states each transition accepts and where it may move the slot. [[ShareConsumerSlot]] checks each
 * transition against it, before (a state the transition does not accept throws, the slot unmoved)
 * and after (an edge not listed is a bug, and throws too). docs/architecture.md draws every edge, and
 * `SlotTransitionsSuite` checks the drawing against this list.
 *
 * Self-loops are transitions that accept a state and leave it (a settlement or a renewal with
 * nothing to do, a transition that failed before it moved the slot). A group's ACLs can refuse a
 * member at any call to the broker while it polls ([[Refusal]]).
 */
private[executor] object SlotTransitions {
  final case class Edge(transition: String, from: String, to: String)

  val Settle = "settle"
  val PollRound = "pollRound"
  val PollPart = "pollPart"
  val AcceptLogged = "acceptLogged"
  val AcceptProcessed = "acceptProcessed"
  val AcceptDelivered = "acceptDelivered"
  val Hide = "hide"
  val ReleaseRound = "releaseRound"
  val ReleaseLeftBehind = "releaseLeftBehind"
  val RenewIfDue = "renewIfDue"
  val Flush = "flush"
  val StopFetching = "stopFetching"
  val Close = "close"

  /** Not asked for: the group's ACLs refused the member during another transition's call to the broker. */
  val Refusal = "refusal"

  private val (idle, holding, stopped, turnedAway, refused, closed) =
    ("Idle", "Holding", "Stopped", "TurnedAway", "Refused", "Closed")
  private val all = Seq(idle, holding, stopped, turnedAway, refused, closed)

  private def edges(transition: String, pairs: (String, String)*): Seq[Edge] =
    pairs.map { case (from, to) => Edge(transition, from, to) }

  val Edges: Set[Edge] = Seq(
    edges(Settle, holding -> idle, idle -> idle, stopped -> stopped, turnedAway -> turnedAway, refused -> refused),
    // A poll that fails leaves the slot idle and subscribed; a refused member throws the refusal again.
    edges(PollRound, idle -> holding, idle -> turnedAway, idle -> idle, refused -> refused),
    edges(PollPart, holding -> holding),
    edges(AcceptLogged, holding -> holding),
    edges(AcceptProcessed, holding -> holding),
    edges(AcceptDelivered, holding -> holding),
    edges(Hide, holding -> holding),
    edges(ReleaseRound, holding -> idle, holding -> holding, idle -> idle, turnedAway -> turnedAway),
    edges(
      ReleaseLeftBehind,
      holding -> idle,
      idle -> idle,
      holding -> holding,
      stopped -> stopped,
      turnedAway -> turnedAway,
      refused -> refused
    ),
    // The take-in is the poll of a consumer that may not have joined: a full group turns it away.
    edges(
      RenewIfDue,
      idle -> idle,
      holding -> holding,
      idle -> turnedAway,
      holding -> turnedAway,
      stopped -> stopped,
      turnedAway -> turnedAway,
      refused -> refused,
      closed -> closed // a renewer that took the slot as its close began
    ),
    edges(Flush, idle -> idle, holding -> holding, stopped -> stopped, turnedAway -> turnedAway, refused -> refused),
    edges(
      StopFetching,
      idle -> stopped,
      holding -> stopped,
      stopped -> stopped,
      turnedAway -> turnedAway,
      refused -> refused,
      closed -> closed
    ),
    all.filterNot(_ == closed).flatMap(from => edges(Close, from -> closed)),
    edges(Refusal, idle -> refused, holding -> refused)
  ).flatten.toSet

  /** The name of `state`'s kind, as the edges name it. */
  def nameOf(state: SlotState): String = state.getClass.getSimpleName

  /** Throws unless `transition` accepts `state`. */
  def requireAccepted(transition: String, state: SlotState, slot: Int): Unit =
    if (!Edges.exists(e => e.transition == transition && e.from == nameOf(state))) {
      throw new IllegalStateException(s"slot $slot: $transition does not apply to a slot ${nameOf(state)}")
    }

  /** Throws unless `transition` may move a slot from `from` to `to`. */
  def requireEdge(transition: String, from: SlotState, to: SlotState, slot: Int): Unit =
    if (!Edges.contains(Edge(transition, nameOf(from), nameOf(to)))) {
      throw new IllegalStateException(
        s"slot $slot: $transition moved it from ${nameOf(from)} to ${nameOf(to)}, which the protocol has no edge for"
      )
    }
}
