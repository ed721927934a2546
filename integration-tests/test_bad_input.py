"""Bad input fails at load() or query start with a message that names the option and the fix."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.errors import IllegalArgumentException, StreamingQueryException, UnsupportedOperationException
from pyspark.sql import SparkSession

from conftest import BOOTSTRAP, JAR, KafkaCluster, run_drain_job

VALID = {"kafka.bootstrap.servers": BOOTSTRAP, "kafka.share.group.id": "g", "subscribe": "t"}


def load(spark: SparkSession, options: dict[str, str]) -> None:
    spark.readStream.format("kafka-share").options(**options).load()


def refusal(spark: SparkSession, options: dict[str, str]) -> str:
    """The message load() fails with."""
    with pytest.raises(IllegalArgumentException) as failure:
        load(spark, options)
    return str(failure.value)


def without(key: str) -> dict[str, str]:
    return {k: v for k, v in VALID.items() if k != key}


OWNED = [
    ("group.id", "sets it from option 'kafka.share.group.id'"),
    ("group.type", "always uses a share group"),
    ("key.deserializer", "keys are always returned as binary"),
    ("value.deserializer", "values are always returned as binary"),
    ("share.acknowledgement.mode", "acknowledges records itself after Spark commits"),
    ("share.auto.offset.reset", "use option 'startingOffsets'"),
    ("enable.auto.commit", "share consumers do not accept it"),
    ("auto.offset.reset", "share consumers do not accept it"),
    ("interceptor.classes", "share consumers do not accept it"),
    ("isolation.level", "share consumers do not accept it"),
    ("group.instance.id", "share consumers do not accept it"),
    ("session.timeout.ms", "share consumers do not accept it"),
    ("partition.assignment.strategy", "share consumers do not accept it"),
]

CASES = [
    pytest.param(
        without("kafka.bootstrap.servers"),
        "[KAFKA_SHARE_MISSING_OPTION] Option 'kafka.bootstrap.servers' is required",
        id="missing-bootstrap",
    ),
    pytest.param(
        without("kafka.share.group.id"),
        "[KAFKA_SHARE_MISSING_OPTION] Option 'kafka.share.group.id' is required",
        id="missing-group",
    ),
    pytest.param(
        without("subscribe"), "[KAFKA_SHARE_NO_SUBSCRIPTION] One of the options 'subscribe'", id="no-topics"
    ),
    pytest.param(
        {**VALID, "subscribePattern": "t.*"},
        "Options 'subscribe', 'subscribePattern' cannot be used together",
        id="subscribe-and-pattern",
    ),
    pytest.param(
        {**without("subscribe"), "subscribePattern": "t[("},
        "Invalid value 't[(' for option 'subscribePattern': expected a Java regex",
        id="bad-pattern",
    ),
    pytest.param(
        {**VALID, "kafka.share.acknowledgment.mode": "auto"},
        "Invalid value 'auto' for option 'kafka.share.acknowledgment.mode': "
        "expected one of 'implicit', 'explicit'",
        id="unknown-ack-mode",
    ),
    pytest.param(
        {**VALID, "kafka.share.exactly.once.strategy": "magic"},
        "Invalid value 'magic' for option 'kafka.share.exactly.once.strategy': expected one of 'none', "
        "'idempotent', 'checkpoint-dedup', 'two-phase-commit'",
        id="unknown-strategy",
    ),
    *[
        pytest.param(
            {**VALID, option: value},
            f"Invalid value '{value}' for option '{option}': expected a positive whole number",
            id=f"{option}={value}",
        )
        for option in (
            "kafka.share.parallelism",
            "maxRecordsPerTrigger",
            "pollTimeoutMs",
            "kafka.share.lock.timeout.ms",
        )
        for value in ("0", "-3", "ten")
    ],
    pytest.param(
        {**VALID, "includeHeaders": "yes"},
        "Invalid value 'yes' for option 'includeHeaders': expected 'true' or 'false'",
        id="headers-not-boolean",
    ),
    pytest.param(
        {**VALID, "kafka.share.exactly.once.stratgy": "two-phase-commit"},
        "[KAFKA_SHARE_UNKNOWN_OPTION] Option 'kafka.share.exactly.once.stratgy' is neither an option of the "
        "kafka-share source nor a Kafka client setting: did you mean 'kafka.share.exactly.once.strategy'?",
        id="misspelled-strategy",
    ),
    pytest.param(
        {**VALID, "maxRecordPerTrigger": "100"},
        "[KAFKA_SHARE_UNKNOWN_OPTION] Option 'maxRecordPerTrigger' is neither an option of the kafka-share "
        "source nor a Kafka client setting: did you mean 'maxRecordsPerTrigger'?",
        id="misspelled-source-option",
    ),
    pytest.param(
        {**VALID, "startingOffsets": "yesterday"},
        "Invalid value 'yesterday' for option 'startingOffsets': "
        "expected 'earliest', 'latest', or a non-negative ISO-8601 duration",
        id="bad-starting-offsets",
    ),
]


# Options of Spark's kafka source that mean nothing for a share group; Spark would silently ignore them.
SPARK_KAFKA_SOURCE_OPTIONS = [
    ("assign", "share groups assign partitions on the broker"),
    ("maxOffsetsPerTrigger", "use 'maxRecordsPerTrigger'"),
    ("minOffsetsPerTrigger", "bound it with 'maxRecordsPerTrigger'"),
    ("maxTriggerDelay", "is not held back for more"),
    ("minPartitions", "set how many with 'kafka.share.parallelism'"),
    ("maxRecordsPerPartition", "set how many with 'kafka.share.parallelism'"),
    ("startingOffsetsByTimestamp", "use 'startingOffsets' with a duration back from now"),
    ("startingTimestamp", "use 'startingOffsets' with a duration back from now"),
    ("startingOffsetsByTimestampStrategy", "use 'startingOffsets' with a duration back from now"),
    ("endingOffsets", "a stream, which has no end"),
    ("endingOffsetsByTimestamp", "a stream, which has no end"),
    ("endingTimestamp", "a stream, which has no end"),
    ("failOnDataLoss", "the broker moves the group past them"),
    ("kafkaConsumer.pollTimeoutMs", "use 'pollTimeoutMs'"),
    ("fetchOffset.retryIntervalMs", "'fetchOffset.numRetries' sets how many in a row"),
    ("groupIdPrefix", "use 'kafka.share.group.id'"),
]


@pytest.mark.parametrize(
    ("option", "pointer"), SPARK_KAFKA_SOURCE_OPTIONS, ids=[o for o, _ in SPARK_KAFKA_SOURCE_OPTIONS]
)
def test_spark_kafka_source_option_without_meaning_here_fails_at_load(
    spark: SparkSession, option: str, pointer: str
) -> None:
    # Lower-cased, as users also write them: Spark's option names are case-insensitive.
    message = refusal(spark, {**VALID, option.lower(): "false"})
    assert (
        f"[KAFKA_SHARE_UNSUPPORTED_OPTION] Option '{option}' is not supported by the kafka-share source"
        in message
    )
    assert pointer in message


@pytest.mark.compat
@pytest.mark.parametrize(("options", "message"), CASES)
def test_bad_option_fails_at_load(spark: SparkSession, options: dict[str, str], message: str) -> None:
    assert message in refusal(spark, options)


@pytest.mark.parametrize(("config", "reason"), OWNED, ids=[c for c, _ in OWNED])
def test_kafka_setting_the_source_owns_or_a_share_consumer_rejects(
    spark: SparkSession, config: str, reason: str
) -> None:
    message = refusal(spark, {**VALID, f"kafka.{config}": "x"})
    assert f"[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.{config}' cannot be set" in message
    assert reason in message


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("max.poll.records", "expected a value of type INT, valid values: [1,...]"),
        ("share.acquire.mode", "type STRING, valid values: [batch_optimized, record_limit]"),
        ("fetch.max.bytes", "expected a value of type INT"),
    ],
)
def test_kafka_setting_of_a_value_the_consumer_refuses_fails_at_load_without_showing_it(
    spark: SparkSession, config: str, expected: str
) -> None:
    message = refusal(spark, {**VALID, f"kafka.{config}": "hunter2"})
    assert f"[KAFKA_SHARE_INVALID_KAFKA_CONFIG] Kafka setting 'kafka.{config}' has a value" in message
    assert expected in message
    assert "hunter2" not in message


def test_messages_never_echo_kafka_settings(spark: SparkSession) -> None:
    secret = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2";'
    message = refusal(
        spark, {**VALID, "kafka.sasl.jaas.config": secret, "kafka.enable.auto.commit": "hunter2"}
    )
    assert "hunter2" not in message


def test_the_strategies_that_log_rounds_refuse_a_speculating_application_at_load(
    kafka: KafkaCluster, group: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # An application of its own: spark.speculation is fixed when its SparkContext starts.
    topic = kafka.new_topic()
    speculating = ("--spark-conf", "spark.speculation=true")
    assert run_drain_job(topic, group, tmp_path, "--strategy", "checkpoint-dedup", *speculating) != 0
    printed = capfd.readouterr().err
    conflict = (
        "[KAFKA_SHARE_CONFLICTING_OPTIONS] Options 'spark.speculation', 'kafka.share.exactly.once.strategy'"
    )
    assert conflict in printed
    assert "set spark.speculation=false for this application" in printed
    assert not list((tmp_path / "out").glob("batch-*.json")), "the query ran"


def test_the_strategies_that_log_rounds_refuse_async_progress_tracking_at_query_start(
    spark: SparkSession, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """asyncProgressTrackingEnabled is a writeStream option, so the source learns of it when the query
    starts: the query fails then, before it reads anything."""
    topic = kafka.topic_with(["r"])
    options = {**VALID, "subscribe": topic, "kafka.share.group.id": group, "startingOffsets": "earliest"}
    options["kafka.share.exactly.once.strategy"] = "checkpoint-dedup"
    df = spark.readStream.format("kafka-share").options(**options)
    query = (
        df.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .option("asyncProgressTrackingEnabled", "true")
        .trigger(processingTime="1 second")
        .start()
    )
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    message = str(failure.value)
    conflict = (
        "[KAFKA_SHARE_CONFLICTING_OPTIONS] Options 'asyncProgressTrackingEnabled', "
        "'kafka.share.exactly.once.strategy'"
    )
    assert conflict in message
    assert "remove the writeStream option asyncProgressTrackingEnabled" in message
    assert query.recentProgress == [], "the query ran a batch"
    assert kafka.total_lag(group) in (None, 1), "the query acknowledged a record"


def test_valid_options_load_a_streaming_frame_with_the_kafka_schema_plus_delivery_count(
    spark: SparkSession,
) -> None:
    df = spark.readStream.format("kafka-share").options(**VALID, includeHeaders="true").load()
    assert df.isStreaming
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
        "deliveryCount",
    ]


def test_batch_read_points_to_available_now(spark: SparkSession) -> None:
    with pytest.raises(UnsupportedOperationException, match="KAFKA_SHARE_BATCH_READ_UNSUPPORTED") as failure:
        spark.read.format("kafka-share").options(**VALID).load()
    message = str(failure.value)
    assert "spark.readStream.format" in message
    assert "trigger(availableNow=True)" in message


def test_unreachable_broker_fails_the_query_within_the_api_timeout(spark: SparkSession) -> None:
    options = {**VALID, "kafka.bootstrap.servers": "localhost:1", "kafka.default.api.timeout.ms": "3000"}
    started = time.monotonic()
    query = (
        spark.readStream.format("kafka-share").options(**options).load().writeStream.format("noop").start()
    )
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    assert time.monotonic() - started < 30
    assert (
        "[KAFKA_SHARE_BROKER_UNREACHABLE] Could not reach the Kafka cluster at localhost:1 within 3000 ms"
        in str(failure.value)
    )


LOAD_WITH_JAR = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.jars", sys.argv[1]).getOrCreate()
try:
    spark.readStream.format("kafka-share").options(**dict(a.split("=", 1) for a in sys.argv[2:])).load()
except Exception as e:
    print(str(e).splitlines()[0])
"""


def test_a_jar_built_for_another_spark_line_fails_at_load_naming_both(tmp_path: Path) -> None:
    # The Spark 3.5 build (Scala 2.13) on this Spark 4.3, in an application of its own.
    jar = (
        Path(JAR).parent.parent.parent
        / "spark-3.5/target/scala-2.13"
        / Path(JAR).name.replace("spark-kafka-share-", "spark-kafka-share-spark35_2.13-")
    )
    assert jar.is_file(), f"no {jar}: run `make jar`"
    (tmp_path / "load.py").write_text(LOAD_WITH_JAR)
    options = [f"{k}={v}" for k, v in VALID.items()]
    run = subprocess.run(
        [sys.executable, str(tmp_path / "load.py"), str(jar), *options],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert (
        "[KAFKA_SHARE_SPARK_UNSUPPORTED] This kafka-share jar is built for Spark 3.5 with Scala 2.13; "
        "this application runs Spark 4.3.0 with Scala 2.13" in run.stdout
    ), run.stdout + run.stderr[-2000:]
