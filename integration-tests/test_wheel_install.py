"""The wheel on its own: a fresh virtualenv holding only pyspark and spark-kafka-share, installed from
local files with `pip --no-index` (nothing downloaded), runs a kafka-share query on the local broker.
The wheel installs beside the pyspark already there and leaves it as it is, as on a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOOTSTRAP, KafkaCluster, values

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
"""


def test_wheel_runs_a_query_in_a_fresh_virtualenv_without_downloading(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    wheel, wheelhouse = (
        os.environ.get("SPARK_KAFKA_SHARE_WHEEL"),
        os.environ.get("SPARK_KAFKA_SHARE_WHEELHOUSE"),
    )
    if not (wheel and wheelhouse and Path(wheel).is_file()):
        pytest.fail(
            "SPARK_KAFKA_SHARE_WHEEL and SPARK_KAFKA_SHARE_WHEELHOUSE are unset: run it through `make test`."
        )
    topic = kafka.new_topic()
    kafka.produce(topic, values(100))

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin/pip"), "install", "--quiet", "--no-index", "--find-links", wheelhouse]
    subprocess.run([*pip, "pyspark"], check=True, timeout=600)  # the cluster's own pyspark
    pyspark_files = sorted(p.name for p in venv.glob("lib/python*/site-packages/pyspark-*.dist-info"))
    subprocess.run([*pip, wheel], check=True, timeout=600)
    assert sorted(p.name for p in venv.glob("lib/python*/site-packages/pyspark-*.dist-info")) == pyspark_files
    (tmp_path / "app.py").write_text(APP)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "SPARK_HOME", "VIRTUAL_ENV")
    }
    run = subprocess.run(
        [str(venv / "bin/python"), "app.py", BOOTSTRAP, group, topic],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "records read: 100" in run.stdout
