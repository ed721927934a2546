"""The package on a Spark Connect session: a real Connect server (from the venv's pyspark, with the
connector jar) reads a share group of the real broker, from this process and from a virtualenv that
holds only pyspark-client and the wheel; the functions that need the driver JVM refuse a Connect
session by name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest
import spark_kafka_share as sks
from pyspark.sql import DataFrame, SparkSession

from conftest import BOOTSTRAP, JAR, KafkaCluster, free_port, values
from expectations import assert_every_record_once
from offline_virtualenv import OfflineVirtualenv, built_wheel

# What pyspark sets to mark the process as a Connect client; it turns classic pyspark calls into
# Connect ones, so it must not outlive this module (the suites after it use the classic session).
CONNECT_MODE_VARIABLE = "SPARK_CONNECT_MODE_ENABLED"


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A Spark Connect server with the connector jar, in its own process group; yields its port."""
    if not Path(JAR).is_file():
        pytest.fail(f"Connector jar {JAR} is missing: run `make jar`.")
    workdir = tmp_path_factory.mktemp("connect-server")
    spark_home = Path(pyspark.__file__).parent
    port = free_port()
    command = [
        str(spark_home / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--jars",
        JAR,
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        "spark.sql.streaming.stopTimeout=60s",
    ]
    # The server is a classic Spark application: none of the client's Connect settings apply to it.
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", CONNECT_MODE_VARIABLE)}
    env["SPARK_HOME"] = str(spark_home)
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 180
        while not _answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                log_tail = log_path.read_text(errors="replace")[-3000:]
                pytest.fail(f"Spark Connect server did not start on port {port}:\n{log_tail}")
            time.sleep(0.5)
        yield port
    finally:
        # spark-submit execs the JVM, so the group holds the server and anything it started.
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="module")
def connect_spark(connect_server: int, kafka: KafkaCluster) -> Iterator[SparkSession]:
    """A Connect client session. Depends on `kafka` so that the classic session exists first: once
    this process is a Connect client, SparkSession.builder would hand out Connect sessions."""
    with pytest.MonkeyPatch.context() as patch:
        # Set here (pyspark sets it too) so that leaving the context removes it again.
        patch.setenv(CONNECT_MODE_VARIABLE, "1")
        # create(), not getOrCreate(): the latter refuses while a classic SparkContext is running.
        session = SparkSession.builder.remote(f"sc://localhost:{connect_server}").create()
        try:
            yield session
        finally:
            session.stop()


def test_read_share_stream_on_connect_delivers_every_record_once(
    connect_spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    assert sks._jvm.is_connect_session(connect_spark)
    topic = kafka.new_topic(partitions=2)
    expected = values(2_000)
    kafka.produce(topic, expected, key=lambda i: str(i))

    df = sks.read_share_stream(
        connect_spark,
        bootstrap_servers=BOOTSTRAP,
        group_id=group,
        subscribe=topic,
        parallelism=2,
        starting_offsets="earliest",
    )
    query = (
        df.selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName("connect_records")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "Trigger.AvailableNow did not finish"
    assert query.exception() is None

    got = [row.value for row in connect_spark.table("connect_records").collect()]
    # Acknowledged, not just read: the broker has nothing left to deliver to the group.
    assert kafka.group_state(group)["members"] == [], "stopped query left consumers in the group"
    assert_every_record_once(expected, got, kafka=kafka, group=group, topic=topic)


def test_options_the_server_rejects_raise_the_package_error_on_connect(
    connect_spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # The pattern's syntax is only checked by the JVM, so this error crosses the Connect channel.
    with pytest.raises(sks.KafkaShareConfigurationError) as raised:
        sks.read_share_stream(
            connect_spark, bootstrap_servers=BOOTSTRAP, group_id=group, subscribe_pattern="t[("
        )
    assert raised.value.condition == "KAFKA_SHARE_INVALID_OPTION_VALUE"
    assert "Invalid value 't[(' for option 'subscribePattern': expected a Java regex" in str(raised.value)


CONNECT_ONLY_APP = """
import importlib.util
import sys
from pyspark.sql import SparkSession
import spark_kafka_share as sks

assert importlib.util.find_spec("py4j") is None, "pyspark-client brought py4j"
remote, bootstrap, group, topic = sys.argv[1:]
spark = SparkSession.builder.remote(remote).getOrCreate()
options = sks.KafkaShareOptions(bootstrap, group, subscribe=[topic], starting_offsets="earliest")
query = (sks.read_share_stream(spark, options).writeStream.format("memory").queryName("records")
         .trigger(availableNow=True).start())
query.awaitTermination()
for row in spark.table("records").selectExpr("CAST(value AS STRING) AS value").collect():
    print("record:", row.value)
try:
    sks.read_share_stream(spark, options, subscribe=None, subscribe_pattern="t[(")
except sks.KafkaShareConfigurationError as error:
    print("rejected:", error.condition)
"""


def test_the_wheel_on_pyspark_client_alone_reads_through_connect(
    connect_server: int, kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """What serverless and Databricks Connect users have: no JVM, no py4j, only the Connect client."""
    wheel = built_wheel()
    expected = values(100)
    topic = kafka.topic_with(expected)
    venv = OfflineVirtualenv(tmp_path)
    venv.install("pyspark-client", wheel)
    run = venv.run(CONNECT_ONLY_APP, f"sc://localhost:{connect_server}", BOOTSTRAP, group, topic)
    got = [line.removeprefix("record: ") for line in run.stdout.splitlines() if line.startswith("record: ")]
    assert_every_record_once(expected, got, kafka=kafka, group=group, topic=topic)
    assert "rejected: KAFKA_SHARE_INVALID_OPTION_VALUE" in run.stdout


def _share_group_state(spark: SparkSession) -> None:
    sks.share_group_state(spark, BOOTSTRAP, "any-group")


def _share_group_state_df(spark: SparkSession) -> None:
    sks.share_group_state_df(spark, BOOTSTRAP, "any-group")


def _acknowledge(spark: SparkSession) -> None:
    batch: DataFrame = spark.range(1)
    sks.acknowledge(batch, batch)


def _release_or_dead_letter(spark: SparkSession) -> None:
    batch: DataFrame = spark.range(1)
    sks.release_or_dead_letter(batch, batch, max_deliveries=3)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (_share_group_state, "share_group_state"),
        (_share_group_state_df, "share_group_state"),
        (_acknowledge, "acknowledge()"),
        (_release_or_dead_letter, "release_or_dead_letter()"),
    ],
    ids=["share_group_state", "share_group_state_df", "acknowledge", "release_or_dead_letter"],
)
def test_functions_that_need_the_driver_jvm_refuse_connect_by_name(
    connect_spark: SparkSession, call: Callable[[SparkSession], None], name: str
) -> None:
    with pytest.raises(sks.KafkaShareConnectNotSupportedError) as raised:
        call(connect_spark)
    assert raised.value.condition == "KAFKA_SHARE_CLASSIC_SESSION_REQUIRED"
    assert str(raised.value).startswith(f"[KAFKA_SHARE_CLASSIC_SESSION_REQUIRED] {name} needs a classic")
