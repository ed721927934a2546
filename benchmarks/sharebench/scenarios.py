"""The sections of the bench (`--sections`), each a function that runs its scenarios in order, prints
what it measured as it ends (report.show) and returns its results. What each scenario measures is
in benchmarks/bench.py's docstring, which `--help` prints.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

from pyspark.sql import SparkSession

from .jvm import jvm_cpu
from .kafka_tools import Kafka, make_topic, raw_share_consumers
from .object_store import S3Emulator
from .report import show
from .spark_queries import checkpoint_manager, idle_cpu, kafka_share, spark_batch_floor, spark_kafka_source
from .variants import (
    ABORTABLE_MANAGER,
    ASYNC_PROGRESS,
    B_VARIANTS,
    FILE_SYSTEM_CHECKPOINTS,
    FILE_SYSTEM_MANAGER,
    FIRST_BATCH_VARIANTS,
    KAFKA_DEFAULT_LOCK_LIMIT,
    S3_VARIANTS,
    STRATEGIES,
    WORK_VARIANTS,
    work_variant,
)


def lock_limit_drain(
    spark: SparkSession,
    kafka: Kafka,
    topic: str,
    records: int,
    partitions: int,
    consumers: int,
    variant: str,
    setting: str = "",
    async_progress: bool = False,
) -> dict[str, Any]:
    """A b) drain of one of B_VARIANTS, under whatever other `setting` the caller has made."""
    scenario = f"b) kafka-share{variant} P={consumers}{setting}"
    limit = B_VARIANTS[variant]
    share = kafka_share(
        spark, kafka, scenario, topic, consumers, records, 0, limit, async_progress=async_progress
    )
    return share | {"partitions": partitions, "variant": (variant.strip() or "default") + setting}


def raw_against_kafka_share(
    spark: SparkSession, kafka: Kafka, topics: dict[int, str], records: int
) -> list[dict[str, Any]]:
    """ab) on each of `topics` (by partitions): c), then a) and b) at each parallelism."""
    results: list[dict[str, Any]] = []
    for partitions, topic in topics.items():
        source = spark_kafka_source(spark, kafka, "c) kafka source", topic, records)
        results.append(source | {"partitions": partitions})
        for consumers in (1, 2, 4):
            results.append(raw_share_consumers(kafka, topic, consumers, records) | {"partitions": partitions})
            for variant in B_VARIANTS:
                results.append(lock_limit_drain(spark, kafka, topic, records, partitions, consumers, variant))
        show([r for r in results if r.get("partitions") == partitions])
    return results


def batch_floor(
    spark: SparkSession, kafka: Kafka, b_topics: dict[int, str], records: int
) -> list[dict[str, Any]]:
    """floor) Spark's own cost of a batch, with its default checkpoint file manager and its
    FileSystem-based one (on a local disk, Hadoop's FileContext rename starts a `readlink` process
    when Hadoop has no native library, as here); and the b) drains of `b_topics` with the latter."""
    measured = [spark_batch_floor(spark, "default checkpoint manager")]
    with checkpoint_manager(spark, FILE_SYSTEM_MANAGER):
        measured.append(spark_batch_floor(spark, "FileSystem-based checkpoint manager"))
        # b) again with that manager, at Kafka's default lock limit and at the most Kafka allows:
        # the two tunings together.
        for partitions, topic in b_topics.items():
            for consumers in (1, 2, 4):
                for variant in ("", " locks 10000"):
                    manager = ", FileSystem-based checkpoint manager"
                    result = lock_limit_drain(
                        spark, kafka, topic, records, partitions, consumers, variant, manager
                    )
                    measured.append(result)
    show(measured)
    return measured


def async_progress_tracking(
    spark: SparkSession, kafka: Kafka, b_topics: dict[int, str], records: int
) -> list[dict[str, Any]]:
    """async) the floor's query and the b) drains of `b_topics` again with Spark's async progress
    tracking (writeStream option asyncProgressTrackingEnabled, for the noop, console, memory and
    Kafka sinks): the offset and commit logs are written in the background, at most once a second,
    instead of twice a batch."""
    measured = [spark_batch_floor(spark, "async progress tracking", async_progress=True)]
    for partitions, topic in b_topics.items():
        for consumers in (1, 2, 4):
            for variant in ("", " locks 10000"):
                setting = ", async progress tracking"
                result = lock_limit_drain(
                    spark, kafka, topic, records, partitions, consumers, variant, setting, async_progress=True
                )
                measured.append(result)
    show(measured)
    return measured


def idle(spark: SparkSession, kafka: Kafka, topic: str, records: int) -> list[dict[str, Any]]:
    """idle) a kafka-share and a `kafka` source query on the drained `topic`, with the default trigger
    and with a 1 s trigger; then the same JVM with no query running."""
    results: list[dict[str, Any]] = []
    for trigger in (None, "1 second"):
        for source in ("kafka-share", "kafka"):
            results.append(idle_cpu(spark, kafka, source, topic, records, trigger))
        show(results[-2:])
    # The same JVM with no query running, measured after the idle queries (before them, it is
    # still busy after the drains, compiling and collecting): what an idle stream adds is
    # measured against this.
    time.sleep(10)
    baseline = jvm_cpu(spark, 60)
    results.append({"scenario": "idle) no query (the JVM's own use)", "partitions": 4, **baseline})
    show(results[-1])
    return results


def per_record_work(spark: SparkSession, kafka: Kafka, work_records: int) -> list[dict[str, Any]]:
    """d) 1 ms of work per record on a new 1-partition topic of `work_records`: the `kafka` source,
    then each of WORK_VARIANTS at parallelism 1, 2 and 4."""
    results: list[dict[str, Any]] = []
    work_topic = make_topic(kafka, 1, work_records)
    # The `kafka` source both ways, so that each kafka-share variant has its like to compare with.
    for async_progress in (False, True):
        variant = "kafka source" + (" async progress tracking" if async_progress else "")
        source = spark_kafka_source(
            spark, kafka, f"d) 1 ms/record {variant}", work_topic, work_records, 1, async_progress
        )
        results.append(source | {"partitions": 1, "variant": variant})
        show(results[-1])
    for name, options, setting in WORK_VARIANTS:
        manager = FILE_SYSTEM_MANAGER if setting == FILE_SYSTEM_CHECKPOINTS else None
        for consumers in (1, 2, 4):
            scenario = f"d) 1 ms/record {work_variant(name, setting)} P={consumers}"
            with checkpoint_manager(spark, manager):
                result = kafka_share(
                    spark,
                    kafka,
                    scenario,
                    work_topic,
                    consumers,
                    work_records,
                    1,
                    options,
                    async_progress=setting == ASYNC_PROGRESS,
                )
            variant = {"variant": f"work {work_variant(name, setting)}", "spark_setting": setting}
            results.append(result | {"partitions": 1} | variant)
            show(results[-1])
    return results


def first_batch_drains(
    spark: SparkSession,
    kafka: Kafka,
    first_batch_records: int,
    work_records: int,
    rounds: int,
) -> list[dict[str, Any]]:
    """firstbatch) each of FIRST_BATCH_VARIANTS at P=2 and P=4, the settings alternating within each
    round so that a warming JVM favours neither."""
    b_topics = {p: make_topic(kafka, p, first_batch_records) for p in (4, 1)}
    work_topic = make_topic(kafka, 1, work_records)
    kinds = (("b", b_topics, first_batch_records, 0), ("d", {1: work_topic}, work_records, 1))
    measured = []
    for round_number in range(1, rounds + 1):
        for kind, topics, records, work_ms in kinds:
            for (partitions, topic), consumers, (setting, options) in itertools.product(
                topics.items(), (2, 4), FIRST_BATCH_VARIANTS[kind]
            ):
                scenario = f"firstbatch) {kind} {setting} P={consumers} round {round_number}"
                result = kafka_share(spark, kafka, scenario, topic, consumers, records, work_ms, options)
                timeline = result["batch_timeline"]
                # On 1 partition: when a batch first held the records of more than one consumer.
                one_consumer_most = KAFKA_DEFAULT_LOCK_LIMIT // consumers
                shared = (
                    next((start for start, rows, *_ in timeline if rows > one_consumer_most), None)
                    if partitions == 1
                    else None
                )
                measured.append(
                    result
                    | {
                        "partitions": partitions,
                        "first_batch_setting": f"{kind} {setting}",
                        "first_batch_start_s": timeline[0][0],
                        "first_batch_ms": float(timeline[0][2]),
                        "shared_from_s": shared,
                    }
                )
                show(measured[-1])
    return measured


def strategies(spark: SparkSession, kafka: Kafka, topic: str, records: int) -> list[dict[str, Any]]:
    """e) The cost of each exactly-once strategy: the same drain at P=4, each with a group of its own."""
    results: list[dict[str, Any]] = []
    for strategy in STRATEGIES:
        options = {"kafka.share.exactly.once.strategy": strategy}
        result = kafka_share(spark, kafka, f"e) strategy {strategy} P=4", topic, 4, records, 0, options)
        results.append(result | {"partitions": 4, "strategy": strategy})
        show(results[-1])
    return results


def on_object_store(
    spark: SparkSession, kafka: Kafka, s3: S3Emulator, s3_records: int
) -> list[dict[str, Any]]:
    """f) The same with the checkpoint on S3: what each batch asks of the store. A first write starts
    S3A's client, so that the first strategy does not pay for it."""
    results: list[dict[str, Any]] = []
    spark.range(1).write.mode("overwrite").json(f"s3a://{S3Emulator.bucket}/warm-up")
    s3_topic = make_topic(kafka, 4, s3_records)
    for strategy, manager in S3_VARIANTS:
        name = f"{strategy}-{manager}-{uuid.uuid4().hex[:6]}"
        options = {"kafka.share.exactly.once.strategy": strategy}
        scenario = f"f) strategy {strategy} P=4, checkpoint on S3, {manager} checkpoint manager"
        checkpoint = f"s3a://{S3Emulator.bucket}/{name}"
        with checkpoint_manager(spark, ABORTABLE_MANAGER if manager == "abortable" else None):
            result = kafka_share(spark, kafka, scenario, s3_topic, 4, s3_records, 0, options, checkpoint)
        requests = s3.requests_under(name)
        per_batch = {
            origin: sum(verbs.values()) / result["batches_run"] for origin, verbs in requests.items()
        }
        on_s3 = {
            "strategy_on_s3": strategy,
            "checkpoint_manager": manager,
            "s3_requests": requests,
            "s3_requests_per_batch": per_batch,
        }
        results.append(result | {"partitions": 4} | on_s3)
        show(results[-1])
    return results
