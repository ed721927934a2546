"""One run of the bench: the options, the Spark session (and S3 emulator), the sections asked for in
their order, then the result file under benchmarks/results/ and the printed table.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from pyspark.sql import SparkSession

from . import REPO, scenarios
from .kafka_tools import Kafka, broker_version, make_topic
from .latency import latency
from .object_store import S3Emulator
from .options import parse_args
from .report import print_table, write_results
from .spark_queries import sbt_jars
from .timings import TIMELINE_COLUMNS


def main(description: str | None) -> None:
    """Runs the bench as the command line asks; `description` heads `--help`."""
    args = parse_args(description)
    sections = set(args.sections.split(","))
    kafka = Kafka(args.bootstrap_servers, args.record_size, args.record_batch_bytes)
    jars = [args.jar, *sbt_jars("sparkKafkaSource", "spark-sql-kafka-0-10_")]
    if "latency" in sections:  # its sink, a foreach writer that writes each row as it gets it
        jars += sbt_jars("jvmHelpers", "jvm-helpers-")
    s3 = S3Emulator() if "objectstore" in sections else None
    if s3:
        jars += sbt_jars("objectStore", "hadoop-aws-")
    builder = (
        SparkSession.builder.master("local[4]")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        # Keep every batch's progress, for the batch-duration percentiles.
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
    )
    for key, value in (s3.spark_conf() if s3 else {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    results: list[dict[str, Any]] = []
    topic_4p = make_topic(kafka, 4, args.records)
    topics = {4: topic_4p, 1: make_topic(kafka, 1, args.records)} if "ab" in sections else {}
    # The b) drains of floor and async: on ab's topics, or on the 4-partition topic only without ab.
    b_topics = topics or {4: topic_4p}
    if "ab" in sections:
        results += scenarios.raw_against_kafka_share(spark, kafka, topics, args.records)
    if "floor" in sections:
        results += scenarios.batch_floor(spark, kafka, b_topics, args.records)
    if "async" in sections:
        results += scenarios.async_progress_tracking(spark, kafka, b_topics, args.records)
    if "idle" in sections:
        results += scenarios.idle(spark, kafka, topic_4p, args.records)
    if "d" in sections:
        results += scenarios.per_record_work(spark, kafka, args.work_records)
    if "firstbatch" in sections:
        results += scenarios.first_batch_drains(
            spark, kafka, args.first_batch_records, args.work_records, args.first_batch_rounds
        )
    if "strategies" in sections:
        results += scenarios.strategies(spark, kafka, topic_4p, args.records)
    if s3:
        results += scenarios.on_object_store(spark, kafka, s3, args.s3_records)
    if "latency" in sections:
        rates = [int(r) for r in args.latency_rates.split(",")]
        partitions = [int(p) for p in args.latency_partitions.split(",")]
        results += latency(spark, kafka, rates, partitions, args.latency_seconds, args.latency_repeats)
    spark.stop()
    if s3:
        s3.stop()

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "benchmarks" / "results" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "records": args.records,
        "record_size": args.record_size,
        "record_batch_bytes": args.record_batch_bytes,
        "work_records": args.work_records,
        "s3_records": args.s3_records,
        "sections": sorted(sections),
        "jar": args.jar,
        "machine": f"{os.cpu_count()} cores",
        "spark": "4.3.0 local[4]",
        "kafka": f"{broker_version()} single node",
        "batch_timeline_columns": TIMELINE_COLUMNS,
    }
    write_results(out, meta, results)
    print_table(results)
    print(f"\nwritten to {out.relative_to(REPO)}")
