"""Figures from a streaming query's progress (`StreamingQuery.recentProgress`): the parts of a
batch's time, percentiles, progress timestamps in seconds. Pure functions and names, shared by the
runners that measure and the report that prints.
"""

from __future__ import annotations

import datetime
import statistics
from typing import Any

# The parts of a batch's time in Spark's progress, in the order a batch runs them.
BATCH_PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
# A batch of a drain's `batch_timeline`: its start in s after the query's start, rows, ms, and the ms
# of each of BATCH_PARTS.
TIMELINE_COLUMNS = ("start_s", "rows", "ms", *BATCH_PARTS)


def batch_parts_ms_p50(progress: list[dict[str, Any]]) -> dict[str, float | None]:
    """The p50 of each of BATCH_PARTS over the progress of a query's batches."""
    return {
        part: percentile(sorted(p["durationMs"].get(part, 0) for p in progress), 50) for part in BATCH_PARTS
    }


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
