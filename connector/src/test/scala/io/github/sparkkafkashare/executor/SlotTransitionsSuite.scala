package io.github.sparkkafkashare.executor

import java.nio.file.{Files, Paths}

import scala.jdk.CollectionConverters._

import io.github.sparkkafkashare.executor.SlotTransitions.Edge
import org.scalatest.funsuite.AnyFunSuite

/** The slot protocol's diagram in docs/architecture.md draws exactly the edges the code allows (no broker). */
class SlotTransitionsSuite extends AnyFunSuite {

  /** `From --> To: transition, transition` lines of the diagram, less the start and end markers. */
  private def drawnEdges(): Set[Edge] = {
    val doc = Seq("docs/architecture.md", "../docs/architecture.md").map(Paths.get(_)).find(Files.exists(_))
      .getOrElse(fail("docs/architecture.md not found from " + Paths.get("").toAbsolutePath))
    val lines = Files.readAllLines(doc).asScala
    val diagram = lines.dropWhile(_ != "stateDiagram-v2").drop(1).takeWhile(_ != "```")
    assert(diagram.nonEmpty, "no stateDiagram-v2 block")
    val arrow = """\s*(\w+) --> (\w+): (.+)""".r
    diagram.flatMap {
      case arrow(from, to, transitions) => transitions.split(",").map(t => Edge(t.trim, from, to))
      case marker if marker.contains("[*]") => Nil
      case other => fail(s"a line of the diagram that is not an edge: '$other'")
    }.toSet
  }

  test("every edge the code allows is drawn, and every drawn edge is one the code allows") {
    val drawn = drawnEdges()
    val code = SlotTransitions.Edges
    assert((code -- drawn).isEmpty, "allowed but not drawn")
    assert((drawn -- code).isEmpty, "drawn but not allowed")
  }
}
