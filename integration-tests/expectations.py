"""What the suites expect of a run: each record in the output once (or as often as the run's
guarantee allows), the source's metrics saying the same, and nothing left to the share group."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import KafkaCluster

# How many records a failure message shows of each kind.
SHOWN = 5


def lost_and_duplicated(expected: Iterable[str], got: Iterable[str]) -> tuple[set[str], dict[str, int]]:
    """The expected records missing from `got`, and the records `got` holds more than once."""
    counts = collections.Counter(got)
    return set(expected) - set(counts), {v: n for v, n in counts.items() if n > 1}


def assert_every_record_once(
    expected: Sequence[str],
    got: Iterable[str],
    *,
    kafka: KafkaCluster | None = None,
    group: str | None = None,
    topic: str | None = None,
    metrics: Mapping[str, str] | None = None,
    allow_duplicates_up_to: float = 0,
    report: Callable[[int, int], None] | None = None,
    context: str = "",
) -> dict[str, int]:
    """Checks that `got` holds each of the (distinct) `expected` values once and nothing else.

    `allow_duplicates_up_to` is how many records may come more than once (`math.inf`: any number,
    at-least-once); the others must come once. With `metrics` (the source metrics of the query
    that read `got`), the source acquired and accepted as many records as were expected. With
    `kafka`, `group` and `topic`, the group has nothing of the topic left unacknowledged (Kafka's
    lag, through `KafkaCluster.unfinished`). `report` is given the numbers of records lost and
    duplicated before anything is checked; `context`, what a failure means, ends the message.

    Returns the records that came more than once, with how often each came."""
    if (kafka is None) != (group is None) or (kafka is None) != (topic is None):
        raise TypeError("kafka, group and topic go together: the group's lag of the topic")
    counts = collections.Counter(got)
    lost, duplicated = lost_and_duplicated(expected, counts.elements())
    unexpected = set(counts) - set(expected)
    if report is not None:
        report(len(lost), len(duplicated))
    suffix = f": {context}" if context else ""

    if lost or unexpected or len(duplicated) > allow_duplicates_up_to:
        problems = [f"{len(lost)} of {len(expected)} records lost {sorted(lost)[:SHOWN]}"]
        bound = "any number" if allow_duplicates_up_to == math.inf else f"{allow_duplicates_up_to:g}"
        shown = [f"{v} x{n}" for v, n in sorted(duplicated.items())[:SHOWN]]
        problems.append(f"{len(duplicated)} came more than once (may: {bound}) {shown}")
        problems.append(f"{len(unexpected)} not expected {sorted(unexpected)[:SHOWN]}")
        if kafka is not None and group is not None:
            problems.append(f"the group's lag is now {kafka.total_lag(group)}")
        raise AssertionError("; ".join(problems) + suffix)

    if metrics is not None:
        acquired_accepted = (metrics.get("recordsAcquired"), metrics.get("recordsAccepted"))
        want = (str(len(expected)), str(len(expected)))
        assert acquired_accepted == want, (
            f"(recordsAcquired, recordsAccepted) {acquired_accepted}, not {want}: {dict(metrics)}{suffix}"
        )

    if kafka is not None and group is not None and topic is not None:
        left = kafka.unfinished(group, topic)
        assert left == 0, f"the group has {left} records of {topic} not acknowledged{suffix}"
    return duplicated
