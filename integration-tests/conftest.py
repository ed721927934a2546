"""Fixtures for the integration suites: a real Kafka broker (started by `make kafka-up`) and a real
Spark session with the connector's assembly jar.

Kafka is driven through confluent-kafka, a client independent of the connector, to create topics
and produce records; the share group's state is read through Kafka's Admin API.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

# Re-exported: the tests take them from here, the jobs from jobs/share_metrics.py.
from jobs.share_metrics import acknowledged as acknowledged
from jobs.share_metrics import source_metrics as source_metrics

REPO = Path(__file__).resolve().parent.parent
KAFKA_LOCAL = REPO / "dev" / "kafka-local" / "kafka-local"
# Where dev/kafka-local keeps what it makes next to the broker's data (server.properties, tls/).
KAFKA_LOCAL_STATE = (
    Path(os.environ["KAFKA_DATA_DIR"]).resolve().parent
    if os.environ.get("KAFKA_DATA_DIR")
    else REPO / "target" / "kafka-local"
)
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")
JAR = os.environ.get(
    "SPARK_KAFKA_SHARE_JAR",
    str(REPO / "connector/target/scala-2.13/spark-kafka-share-assembly-0.1.0-SNAPSHOT.jar"),
)
# Python workers on this interpreter too, in this process and in the jobs it starts: PySpark picks
# Arrow-optimized UDFs when the driver has pyarrow, and the workers must have it as well.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _broker_answers() -> bool:
    host, port = BOOTSTRAP.split(",")[0].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "full_matrix_only: a fault-matrix case that only `make fault-matrix` runs, not `make test`"
    )
    config.addinivalue_line(
        "markers",
        "cluster_only: a case of the three-node cluster's faults that only `make test-cluster` runs, "
        "not `make test`",
    )
    config.addinivalue_line(
        "markers",
        "extended: a slow case that only `make test-extended` runs, not `make test`, whose behaviour a "
        "faster case of `make test` covers too, or one that starts brokers of other Kafka releases",
    )
    config.addinivalue_line(
        "markers",
        "compat: the compatibility subset that `make test-compat` runs on every supported Spark line and "
        "Kafka broker release (it runs in `make test` too)",
    )
    config.addinivalue_line(
        "markers",
        "packages: spark-submit --packages from the repository `make publish-local` writes; only "
        "`make test-packages` runs it (it resolves Spark's own kafka source from Maven Central)",
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if not _broker_answers():
        pytest.fail(f"No Kafka broker at {BOOTSTRAP}: run `make kafka-up` (or `make test`, which starts it).")
    if not Path(JAR).is_file():
        pytest.fail(f"Connector jar {JAR} is missing: run `make jar`.")
    # local[4,2]: four task threads, and a failed task gets one retry (as on a cluster).
    session = (
        SparkSession.builder.master("local[4,2]")
        .appName("kafka-share-integration-tests")
        .config("spark.jars", JAR)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@dataclass(frozen=True)
class ConsumedRecord:
    value: str
    headers: dict[str, str]


@dataclass
class KafkaCluster:
    """The local broker, for creating topics, producing records and reading share-group state."""

    bootstrap: str
    admin: AdminClient
    spark: SparkSession
    # Replicas of each new topic: 1 on the single broker, 3 on the three-node cluster
    # (test_cluster_faults.py).
    replication: int = 1

    def new_topic(self, partitions: int = 1) -> str:
        return self.new_topic_named(f"t-{uuid.uuid4().hex[:10]}", partitions)

    def new_topic_named(self, name: str, partitions: int = 1) -> str:
        futures = self.admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=self.replication)]
        )
        futures[name].result(timeout=30)
        return name

    def add_partitions(self, topic: str, total: int) -> None:
        """Grows `topic` to `total` partitions."""
        self.admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=30)

    def topic_with(
        self, values: list[str], partitions: int = 1, key: Callable[[int], str] | None = None
    ) -> str:
        """A new topic of `partitions` partitions, holding `values` (keyed by `key` of their index)."""
        topic = self.new_topic(partitions)
        self.produce(topic, values, key)
        return topic

    def produce(
        self,
        topic: str,
        values: list[str],
        key: Callable[[int], str] | None = None,
        partition: int | None = None,
    ) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "acks": "all"})
        to = {} if partition is None else {"partition": partition}
        for i, value in enumerate(values):
            producer.produce(topic, value=value.encode(), key=key(i).encode() if key else None, **to)
            if i % 1000 == 999:
                producer.poll(0)
        remaining = producer.flush(60)
        assert remaining == 0, f"{remaining} records were not delivered to {topic}"

    def consume_all(self, topic: str, expected_count: int, timeout_s: float = 30) -> list[ConsumedRecord]:
        """Reads `topic` from the start with a plain consumer until `expected_count` records arrived,
        then briefly longer, so that records beyond the expected ones would show."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"read-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        records: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout_s
        quiet_until = None
        try:
            while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                headers = {k: (v or b"").decode() for k, v in (message.headers() or [])}
                records.append(ConsumedRecord((message.value() or b"").decode(), headers))
                if len(records) >= expected_count and quiet_until is None:
                    quiet_until = time.monotonic() + 2
        finally:
            consumer.close()
        return records

    def group_state(self, group: str) -> dict[str, Any]:
        """The share group as Kafka's Admin API reports it (see KafkaShareGroups.describeJson)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        options = {"kafka.bootstrap.servers": self.bootstrap, "kafka.share.group.id": group}
        return dict(json.loads(jvm.io.github.sparkkafkashare.KafkaShareGroups.describeJson(options)))

    def assignment_settled(self, group: str, consumers: int, partitions: int) -> bool:
        """Whether the group's `consumers` members each hold their share of `partitions` (Kafka's
        simple assignor gives each partition to consumers/partitions members when there are more
        consumers than partitions). Until then a member that joined first may hold partitions that
        Kafka moves to another member soon after, and cannot acknowledge or renew what it acquired of
        them: those records come back once their lock expires."""
        members = self.group_state(group)["members"]
        held = [len(m["assignment"]) for m in members]
        return len(held) == consumers and min(held, default=0) > 0 and sum(held) == max(consumers, partitions)

    def set_group_config(self, group: str, name: str, value: str) -> None:
        self._alter_group_config(group, ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET))

    def unset_group_config(self, group: str, name: str) -> None:
        """Deletes a group config: the group then has the broker's value."""
        self._alter_group_config(
            group, ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
        )

    def _alter_group_config(self, group: str, entry: ConfigEntry) -> None:
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
        self.admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    def group_config(self, group: str, name: str) -> str:
        """The value the broker reports for a group config."""
        resource = ConfigResource(ResourceType.GROUP, group)
        return str(self.admin.describe_configs([resource])[resource].result(timeout=30)[name].value)

    def refuse_lock_renewal(self, group: str) -> None:
        """Sets the group's `share.renew.acknowledge.enable` to false: the broker refuses RENEW."""
        self.set_group_config(group, "share.renew.acknowledge.enable", "false")

    def total_lag(self, group: str) -> int | None:
        partitions = self.group_state(group)["partitions"]
        if not partitions or any(p["lag"] is None for p in partitions):
            return None
        return sum(int(p["lag"]) for p in partitions)

    def share_consumer(self, group: str) -> ShareConsumer:
        """A share consumer of `group` (confluent-kafka, independent of the connector) that
        acknowledges only what it is told to."""
        return ShareConsumer(
            {"bootstrap.servers": self.bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
        )

    def unfinished(self, group: str, topic: str) -> int | None:
        """Records of the group not yet acknowledged: Kafka's lag, checked when above 0 and no member
        is left by a share consumer of the group. Kafka persists the lag with each state write,
        and two acknowledgements of one partition written at once can leave the smaller count last
        (a fully acknowledged partition then reports a lag of, say, 1000), until the partition's
        next write. With no member holding records, any unacknowledged record is
        available, so a consumer that finds none in 15 s shows the count was stale.
        What it does find it releases, and the lag stands."""
        lag = self.total_lag(group)
        if not lag or self.group_state(group)["members"]:
            return lag  # a probe would compete with the members for records they should have
        probe = self.share_consumer(group)
        try:
            probe.subscribe([topic])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                found = [m for m in probe.poll(1.0) if m.error() is None]
                for message in found:
                    probe.acknowledge(message, AcknowledgeType.RELEASE)
                if found:
                    return lag
            return 0
        finally:
            probe.close()


@pytest.fixture(scope="session")
def kafka(spark: SparkSession) -> KafkaCluster:
    return KafkaCluster(BOOTSTRAP, AdminClient({"bootstrap.servers": BOOTSTRAP}), spark)


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def driver_log(spark: SparkSession) -> Iterator[Callable[[], str]]:
    """What the driver JVM logs at WARN and above while the test runs, one event a line as
    "LEVEL logger: message" (line breaks in a message escaped, stack traces left out): an appender
    added to log4j's root logger for the test, read back over Py4J."""
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    context = log4j.LogManager.getContext(False)
    root = context.getConfiguration().getRootLogger()
    text = jvm.java.io.StringWriter()
    name = f"kafka-share-test-{uuid.uuid4().hex[:10]}"
    layout = (
        log4j.core.layout.PatternLayout.newBuilder()
        .withPattern("%p %c: %enc{%m}{CRLF}%n")
        .withAlwaysWriteExceptions(False)
        .build()
    )
    appender = (
        log4j.core.appender.WriterAppender.newBuilder()
        .setName(name)
        .setTarget(text)
        .setLayout(layout)
        .build()
    )
    appender.start()
    root.addAppender(appender, None, None)
    context.updateLoggers()
    try:
        yield lambda: str(text.toString())
    finally:
        root.removeAppender(name)
        context.updateLoggers()
        appender.stop()


def share_stream(spark: SparkSession, topic: str, group: str, **options: str) -> DataFrame:
    reader = (
        spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("kafka.share.group.id", group)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def drain_values(spark: SparkSession, df: DataFrame) -> list[str]:
    """The values, sorted, that a Trigger.AvailableNow drain of `df` reads; the drain must not fail."""
    name = f"drain_{uuid.uuid4().hex[:10]}"
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
        return sorted(r.v for r in spark.sql(f"select cast(value as string) v from {name}").collect())
    finally:
        spark.catalog.dropTempView(name)


def batch_committed(query: StreamingQuery, batch_id: int) -> bool:
    """Whether Spark has committed batch `batch_id`: it reports a batch's progress only after writing
    the batch to its commit log."""
    progress = query.lastProgress
    return progress is not None and progress["batchId"] >= batch_id


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, detail: Callable[[], object] | None = None
) -> None:
    """Polls `condition` every 0.5 s; on timeout the error names `what`, with `detail()` if given."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    details = f": {detail()}" if detail else ""
    raise AssertionError(f"timed out after {timeout_s}s waiting until {what}{details}")


def source_thread_stacks(spark: SparkSession) -> str:
    """The stacks of the threads that run the source in the test's JVM (local mode: its executor too),
    the queries' own (where the driver plans and commits batches), Spark's tasks and the consumer
    pool's, for a failure message where a query hangs."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    stacks = []
    for entry in jvm.java.lang.Thread.getAllStackTraces().entrySet().toArray():
        name = entry.getKey().getName()
        if name.startswith(("stream execution thread", "Executor task launch", "kafka-share-")):
            frames = "\n".join(f"    at {frame.toString()}" for frame in entry.getValue())
            stacks.append(f"{name}:\n{frames}")
    return "\n".join(stacks) or "no task or consumer-pool thread"


def values(n: int, prefix: str = "r") -> list[str]:
    return [f"{prefix}-{i:06d}" for i in range(n)]


DRAIN_JOB = Path(__file__).parent / "jobs" / "drain_topic.py"
# The lock of a run whose driver is killed: its restart waits one lock duration for what it held.
KILLED_DRIVER_LOCK_S = 5
KILLED_DRIVER_LOCKS = ("--lock-timeout-ms", str(KILLED_DRIVER_LOCK_S * 1000))


def drain_job_args(
    topic: str, group: str, workdir: Path, extra: tuple[str, ...], checkpoint: Path | None
) -> list[str]:
    """jobs/drain_topic.py's flags, with its checkpoint (unless `checkpoint` names another) and sink
    under `workdir`, whose sink directory this makes."""
    (workdir / "out").mkdir(parents=True, exist_ok=True)
    where = ["--checkpoint", str(checkpoint or workdir / "checkpoint"), "--out", str(workdir / "out")]
    return ["--bootstrap", BOOTSTRAP, "--topic", topic, "--group", group, *where, "--jar", JAR, *extra]


def start_drain_job(
    topic: str,
    group: str,
    workdir: Path,
    *extra: str,
    cwd: Path | None = None,
    checkpoint: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Starts jobs/drain_topic.py in a Spark application of its own, with its checkpoint (unless
    `checkpoint` names another) and sink under `workdir`; its driver runs in `cwd`, if given."""
    command = [sys.executable, str(DRAIN_JOB), *drain_job_args(topic, group, workdir, extra, checkpoint)]
    # The job imports spark_kafka_share from this checkout, as the tests do.
    python_path = os.pathsep.join(p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(command, env={**os.environ, "PYTHONPATH": python_path}, cwd=cwd)


def run_drain_job(
    topic: str,
    group: str,
    workdir: Path,
    *extra: str,
    cwd: Path | None = None,
    checkpoint: Path | None = None,
) -> int:
    """Runs jobs/drain_topic.py to its end; returns its exit code."""
    job = start_drain_job(topic, group, workdir, *extra, cwd=cwd, checkpoint=checkpoint)
    try:
        return job.wait(timeout=300)
    finally:
        job.kill()


def drain_in_session(
    spark: SparkSession, topic: str, group: str, workdir: Path, *extra: str, checkpoint: Path | None = None
) -> int:
    """Runs jobs/drain_topic.py's drain to its end in the tests' own Spark session, where the run needs
    no application of its own (a restart from a checkpoint, with no fault, kill or pause, nor a master,
    Spark conf or jar of its own): it saves an application's start, about 15 s. Returns 0 once the
    drain ended, 1 if it failed (<out>/failure.txt says why)."""
    if str(DRAIN_JOB.parent) not in sys.path:
        sys.path.insert(0, str(DRAIN_JOB.parent))
    import drain_topic

    given = {arg.split("=", 1)[0] for arg in extra}  # "--flag value" or "--flag=value"
    own = [flag for flag in drain_topic.APPLICATION_FLAGS if flag in given]
    assert not own, f"{own} need an application of their own: use run_drain_job"
    args = drain_topic.parser.parse_args(drain_job_args(topic, group, workdir, extra, checkpoint))
    try:
        drain_topic.DrainRun(spark, args).run(timeout_s=300)
        return 0
    except Exception as failure:  # the job's exit code: its error is on stderr, as the job's would be
        print(f"the drain in the test's session failed: {failure}", file=sys.stderr)
        return 1


def read_again_elsewhere(
    topic: str, group: str, workdir: Path, expected: int, *job: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs jobs/drain_topic.py until it has read `expected` records, its first batch with records read
    a second time while the executor that read it is busy (run the job on local-cluster[2,1,...] at
    parallelism 1); returns both reads' executors and values, once checked that they ran apart."""
    again = ("--evaluate-again-elsewhere", "--stop-once-read", str(expected), "--until-acknowledged")
    assert run_drain_job(topic, group, workdir, *job, *again) == 0
    reads = json.loads((workdir / "out" / "second-evaluation.json").read_text())
    first, second = reads["first"], reads["second"]
    assert second["executors"], reads
    assert not set(second["executors"]) & set(first["executors"]), reads
    return first, second


def drained_rows(workdir: Path) -> list[tuple[str, int]]:
    """(value, deliveryCount) of every record in the job's sink: the last write of each batch id."""
    files = sorted((workdir / "out").glob("batch-*.json"))
    return [(value, count) for f in files for value, count in json.loads(f.read_text())]


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_broker(
    action: str, broker_config: dict[str, str] | None = None, kerberos: Path | None = None
) -> None:
    """`stop`, `start` or `restart` the local broker (dev/kafka-local), keeping its data.

    `broker_config` adds server.properties for this start only; the next start goes without them.
    `kerberos`, the directory of a running dev/kdc-local KDC, adds the GSSAPI listener likewise."""
    extra = "\n".join(f"{name}={value}" for name, value in (broker_config or {}).items())
    env = {**os.environ, "KAFKA_LOCAL_BROKER_CONFIG": extra, "KAFKA_LOCAL_KERBEROS": str(kerberos or "")}
    subprocess.run([str(KAFKA_LOCAL), action], check=True, timeout=300, env=env)


def broker_beside(tmp_path_factory: pytest.TempPathFactory, **settings: str) -> Iterator[str]:
    """A broker with share.version=1 on free ports beside the tests' broker, for a module fixture to
    yield from; `settings` are kafka-local's (`KAFKA_BROKER_VERSION`, or a port of their choosing, say)."""
    data = tmp_path_factory.mktemp("kafka") / "data"
    port = free_port()
    env = {
        **os.environ,
        "KAFKA_DATA_DIR": str(data),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
        "KAFKA_SASL_PORT": str(free_port()),
        "KAFKA_SSL_PORT": str(free_port()),
        "KAFKA_MTLS_PORT": str(free_port()),
        **settings,
    }
    start = [str(KAFKA_LOCAL), "start"]
    started = subprocess.run(start, capture_output=True, text=True, timeout=600, env=env)
    assert started.returncode == 0, started.stderr
    try:
        yield f"localhost:{port}"
    finally:
        subprocess.run([str(KAFKA_LOCAL), "stop"], capture_output=True, timeout=300, env=env)


def refusal_at_start(spark: SparkSession, servers: str, group: str, checkpoint: Path, **options: str) -> str:
    """The message of the error with which a query of `group` on the cluster at `servers` fails as it
    starts; `options` are more options of the source."""
    df = share_stream(spark, "any-topic", group, **{"kafka.bootstrap.servers": servers, **options})
    query = df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    return str(failure.value)


def restart_broker_with(request: pytest.FixtureRequest, broker_config: dict[str, str]) -> None:
    """Restarts the local broker with `broker_config` (broker-level defaults) for the calling test
    only: once the test ends, it restarts with its usual settings."""
    local_broker("restart", broker_config)
    request.addfinalizer(lambda: local_broker("restart"))


FAULT_MATRIX: list[tuple[str, str, int, int]] = []
FAULT_MATRIX_FILE = Path(__file__).resolve().parents[1] / "target" / "fault-matrix.md"


def record_fault_result(strategy: str, fault: str, lost: int, duplicated: int) -> None:
    """Adds a row to the fault matrix that pytest_terminal_summary prints."""
    FAULT_MATRIX.append((strategy, fault, lost, duplicated))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FAULT_MATRIX:
        return
    lines = ["| strategy | fault | lost | duplicated |", "|---|---|---|---|"]
    lines += [f"| `{s}` | {f} | {lost} | {dup} |" for s, f, lost, dup in sorted(FAULT_MATRIX)]
    terminalreporter.write_sep("=", "fault-injection matrix (records in the sink)")
    for line in lines:
        terminalreporter.write_line(line)
    FAULT_MATRIX_FILE.parent.mkdir(parents=True, exist_ok=True)
    FAULT_MATRIX_FILE.write_text("\n".join(lines) + "\n")
