"""The wheel on its own: a fresh virtualenv holding only pyspark and spark-kafka-share, installed from
local files with `pip --no-index` (nothing downloaded), runs a kafka-share query on the local broker.
The wheel installs beside the pyspark already there and leaves it as it is, as on a cluster, and picks
the jar for it. The pyspark is the release the tests run with: `make test` installs the newest one,
`make test-compat` each supported line, the oldest (3.5, Scala 2.12) in CI."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from conftest import BOOTSTRAP, KafkaCluster, values
from offline_virtualenv import OfflineVirtualenv, built_wheel

APP = """
import sys
from pyspark.sql import SparkSession
import spark_kafka_share as sks

assert sks.__file__.startswith(sys.prefix), f"imported {sks.__file__}, not the installed wheel"
spark = sks.configure_spark_with_kafka_share(SparkSession.builder.master("local[2]")).getOrCreate()
df = sks.read_share_stream(spark, bootstrap_servers=sys.argv[1], group_id=sys.argv[2], subscribe=sys.argv[3],
                           starting_offsets="earliest")
query = df.writeStream.format("memory").queryName("records").trigger(availableNow=True).start()
query.awaitTermination()
print("records read:", spark.table("records").count())
print("jar:", sks.jar_path())
"""


@pytest.mark.compat
def test_wheel_runs_a_query_in_a_fresh_virtualenv_without_downloading(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    wheel = built_wheel()
    topic = kafka.topic_with(values(100))

    venv = OfflineVirtualenv(tmp_path)
    # The cluster's own pyspark: the wheelhouse holds the release these tests run with.
    venv.install(f"pyspark=={pyspark.__version__}")
    pyspark_installed = venv.distributions("pyspark-")
    venv.install(wheel)
    assert venv.distributions("pyspark-") == pyspark_installed
    run = venv.run(APP, BOOTSTRAP, group, topic)
    assert "records read: 100" in run.stdout
    build = "spark35_2.12" if pyspark.__version__.startswith("3.5.") else "spark4_2.13"
    assert f"spark-kafka-share-{build}.jar" in run.stdout
