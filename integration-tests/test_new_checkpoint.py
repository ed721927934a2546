"""A query started from a new checkpoint that writes where an earlier query wrote: Spark numbers its
batches from 0 again. A sink that skips the batch ids it has seen, after it has read the batch, drops
the records of the new query's first batches, and the source acknowledges them as those batches
commit: nothing tells the source what a sink did with a batch it read. A sink keyed by the query's
checkpoint too (as Delta's own sink keys its transactions by the query's id) gets every record once.
docs/delivery-guarantees.md says both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from conftest import KafkaCluster, share_stream, values
from expectations import assert_every_record_once, lost_and_duplicated

BATCH = 10


def batch_id_sink(
    written: dict[object, list[str]], key: Callable[[int], object]
) -> Callable[[DataFrame, int], None]:
    """A foreachBatch sink that reads each batch, then writes it unless `written` holds its key already."""

    def sink(df: DataFrame, batch_id: int) -> None:
        rows = [r.v for r in df.selectExpr("CAST(value AS STRING) AS v").collect()]
        written.setdefault(key(batch_id), rows)

    return sink


def drain(
    spark: SparkSession, topic: str, group: str, checkpoint: Path, sink: Callable[[DataFrame, int], None]
) -> None:
    stream = share_stream(spark, topic, group, startingOffsets="earliest", maxRecordsPerTrigger=str(BATCH))
    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None


def two_queries(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path, key: Callable[[str, int], object]
) -> tuple[list[str], list[str], str]:
    """Drains a topic with one query, then what was produced since with a query from a new checkpoint,
    both through one sink whose batches `key(checkpoint, batch_id)` names; returns what was produced and
    what the sink holds."""
    topic = kafka.new_topic()
    written: dict[object, list[str]] = {}
    produced = values(3 * BATCH, "first")
    kafka.produce(topic, produced)
    drain(spark, topic, group, tmp_path / "first", batch_id_sink(written, lambda b: key("first", b)))
    later = values(3 * BATCH, "second")
    kafka.produce(topic, later)
    drain(spark, topic, group, tmp_path / "second", batch_id_sink(written, lambda b: key("second", b)))
    return produced + later, [v for rows in written.values() for v in rows], topic


def test_a_sink_keyed_by_batch_id_alone_drops_a_new_checkpoint_s_first_batches_it_read(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected, got, topic = two_queries(spark, kafka, group, tmp_path, lambda _, batch_id: batch_id)
    lost, duplicated = lost_and_duplicated(expected, got)
    # The second query's batches 0, 1, ... were read and skipped: their records are gone, and the group
    # has nothing left, since the source acknowledged every committed batch.
    assert lost
    assert all(v.startswith("second") for v in lost), sorted(lost)
    assert not duplicated, duplicated
    assert kafka.unfinished(group, topic) == 0


def test_a_sink_keyed_by_checkpoint_and_batch_id_gets_every_record_once_across_checkpoints(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    expected, got, topic = two_queries(
        spark, kafka, group, tmp_path, lambda checkpoint, batch_id: (checkpoint, batch_id)
    )
    assert_every_record_once(expected, got, kafka=kafka, group=group, topic=topic)
