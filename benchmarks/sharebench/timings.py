"""Figures from a streaming query's progress (`StreamingQuery.recentProgress`): the parts of a
batch's time, percentiles, progress timestamps in seconds. Pure functions and names, shared by the
runners that measure and the report that prints.
"""

from __future__ import annotations

import datetime
import itertools
import statistics
from typing import Any

# The parts of a batch's time in Spark's progress, in the order a batch runs them.
BATCH_PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
# A batch of a drain's `batch_timeline`: its start in s after the query's start, rows, ms, and the ms
# of each of BATCH_PARTS.
TIMELINE_COLUMNS = ("start_s", "rows", "ms", *BATCH_PARTS)
# kafka-share's own parts of a batch, from its source metrics: its tasks' time polling, acknowledging
# and in the records log (summed over the batch's tasks, which run side by side), and the driver's
# wait on Kafka's Admin API. The metrics are the run's totals, so a batch's part is the difference
# from the progress before it.
SOURCE_PARTS = ("pollMs", "acknowledgeMs", "recordsLogMs", "adminMs")


def batch_parts_ms_p50(progress: list[dict[str, Any]]) -> dict[str, float | None]:
    """The p50 of each of BATCH_PARTS over the progress of a query's batches."""
    return {
        part: percentile(sorted(p["durationMs"].get(part, 0) for p in progress), 50) for part in BATCH_PARTS
    }


def source_parts_ms_p50(progress: list[dict[str, Any]]) -> dict[str, float | None]:
    """The p50 of each of SOURCE_PARTS over the batches with rows of a query's whole progress; none
    for a source that does not report them."""

    def run_totals(p: dict[str, Any]) -> dict[str, str]:
        return p["sources"][0].get("metrics") or {}

    per_batch: dict[str, list[float]] = {part: [] for part in SOURCE_PARTS}
    for before, batch in itertools.pairwise(progress):
        totals = run_totals(batch)
        if batch["numInputRows"] > 0 and all(part in totals for part in SOURCE_PARTS):
            for part in SOURCE_PARTS:
                per_batch[part].append(float(totals[part]) - float(run_totals(before).get(part, 0)))
    if not per_batch[SOURCE_PARTS[0]]:
        return {}
    return {part: percentile(sorted(ms), 50) for part, ms in per_batch.items()}


def ts(iso: str) -> float:
    """A progress timestamp (ISO 8601, UTC) in seconds since the epoch."""
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def percentile(sorted_values: list[float], pct: int) -> float | None:
    """The `pct` percentile of `sorted_values` (None if there are none)."""
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[pct - 1]
