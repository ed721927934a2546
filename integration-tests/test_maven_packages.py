"""The Maven coordinates at work: `spark-submit --packages` resolves kafka-share from the repository
`make publish-local` writes (with a clean Ivy home, as on a new cluster) beside Spark's own `kafka`
source from Maven Central. In one application each reads a topic of its own, and both return every
record: the shaded kafka-clients 4.3 inside kafka-share and Spark's kafka-clients 3.9 share a classpath."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOOTSTRAP, REPO, KafkaCluster, values

# Spark's own kafka source is on Maven Central up to Spark 4.2.0, which runs on Spark 4.3 as well.
SPARK_KAFKA_SOURCE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"

APP = """
import sys
from pyspark.sql import SparkSession

bootstrap, group, share_topic, kafka_topic = sys.argv[1:5]
spark = SparkSession.builder.getOrCreate()
shared = (spark.readStream.format("kafka-share").option("kafka.bootstrap.servers", bootstrap)
          .option("kafka.share.group.id", group).option("subscribe", share_topic)
          .option("startingOffsets", "earliest").load())
query = (shared.selectExpr("CAST(value AS STRING) AS value").writeStream.format("memory")
         .queryName("shared").trigger(availableNow=True).start())
query.awaitTermination()
plain = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", kafka_topic).option("startingOffsets", "earliest").load()
         .selectExpr("CAST(value AS STRING) AS value"))
for name, frame in (("kafka-share", spark.table("shared")), ("kafka", plain)):
    print(name, ",".join(sorted(r.value for r in frame.collect())))
"""


def submit_with_packages(tmp_path: Path, packages: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    """spark-submit with kafka-share (the version `make publish-local` wrote) and `packages` from
    `--packages`, resolved into a clean Ivy home: nothing cached from earlier runs."""
    repository = REPO / "target" / "maven-repo"
    version = next(repository.glob("io/github/sparkkafkashare/spark-kafka-share_2.13/*")).name
    coordinates = [f"io.github.sparkkafkashare:spark-kafka-share_2.13:{version}", *packages]
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[2]",
            "--packages",
            ",".join(coordinates),
            "--repositories",
            repository.as_uri(),
            "--conf",
            f"spark.jars.ivy={tmp_path / 'ivy'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.packages
def test_packages_resolve_kafka_share_beside_sparks_own_kafka_source(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    share_topic, kafka_topic = kafka.new_topic(), kafka.new_topic()
    expected = values(200)
    kafka.produce(share_topic, expected)
    kafka.produce(kafka_topic, expected)
    (tmp_path / "app.py").write_text(APP)

    run = submit_with_packages(
        tmp_path, [SPARK_KAFKA_SOURCE], str(tmp_path / "app.py"), BOOTSTRAP, group, share_topic, kafka_topic
    )
    assert run.returncode == 0, run.stderr[-3000:]
    read = dict(line.split(" ", 1) for line in run.stdout.splitlines() if line.startswith("kafka"))
    assert read.get("kafka-share", "").split(",") == sorted(expected), run.stdout[-2000:]
    assert read.get("kafka", "").split(",") == sorted(expected), run.stdout[-2000:]
    resolved = {p.name for p in (tmp_path / "ivy" / "jars").glob("*.jar")}
    # The POM brings no unshaded Kafka client of its own: the only kafka-clients is Spark's source's.
    assert [j for j in resolved if j.startswith("org.apache.kafka_kafka-clients")] != [], resolved
    assert not any("jose4j" in j for j in resolved), resolved
    assert not any(j.startswith("org.apache.kafka_kafka-clients-4.") for j in resolved), resolved


@pytest.mark.packages
def test_the_java_example_runs_with_the_connector_from_packages(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    """examples/java/ReadToSinkJava.java as its header says to run it: the connector from
    `--packages`, no jar of ours on the command line."""
    examples_jar = REPO / "examples" / "target" / "examples.jar"
    assert examples_jar.is_file(), f"{examples_jar} is missing: run `make jar`"
    topic = kafka.new_topic()
    kafka.produce(topic, values(200))
    run = submit_with_packages(
        tmp_path,
        [],
        "--class",
        "ReadToSinkJava",
        str(examples_jar),
        BOOTSTRAP,
        topic,
        group,
        str(tmp_path / "out"),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "records read: 200" in run.stdout.splitlines(), run.stdout[-2000:]
    assert kafka.unfinished(group, topic) == 0
