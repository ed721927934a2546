"""Reading kafka-share's source metrics, shared by the tests (through conftest) and the jobs they run."""

from __future__ import annotations

from pyspark.sql.streaming import StreamingQuery


def source_metrics(query: StreamingQuery) -> dict[str, str]:
    """The kafka-share source's metrics in the query's last progress (none before its first)."""
    progress = query.lastProgress
    return dict(progress["sources"][0]["metrics"]) if progress else {}


def acknowledged(metrics: dict[str, str]) -> int:
    """Records the query's consumers acknowledged (ACCEPT or REJECT) and Kafka applied: the metrics
    count an acknowledgement once the broker's answer says so. Those it did not apply come back after
    their lock, and are acknowledged again (a consumer that lost their partition in a rebalance cannot
    apply them)."""
    return int(metrics.get("recordsAccepted", 0)) + int(metrics.get("recordsRejected", 0))
