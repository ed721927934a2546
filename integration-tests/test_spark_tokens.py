"""A query whose only login is the Kafka delegation token Spark obtains (issue 76), through a token
Spark's manager replaces before it expires. A broker of this module's own, on other ports than the
shared one, with delegation tokens that expire after 15 s and sessions that must log in again every
5 s, GSSAPI and SCRAM on its SASL listener; a KDC of its own. jobs/token_drain.py runs the query."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from conftest import JAR, KAFKA_LOCAL, REPO, KafkaCluster, values
from expectations import assert_every_record_once

KDC_LOCAL = REPO / "dev" / "kdc-local" / "kdc-local"
STATE = REPO / "target" / "spark-tokens"
KDC_DIR = STATE / "kdc"
TOKEN_LIFETIME_S = 15
PORT = 19292  # the shared broker's ports stay untouched
PLAINTEXT = f"localhost:{PORT}"
SASL = f"localhost:{PORT + 5}"  # dev/kafka-local's KERBEROS listener, with SCRAM added below
BROKER_ENV = {
    "KAFKA_PORT": str(PORT),
    "KAFKA_CONTROLLER_PORT": str(PORT + 1),
    "KAFKA_DATA_DIR": str(STATE / "kafka" / "data"),
    "KAFKA_LOCAL_KERBEROS": str(KDC_DIR),
    "KAFKA_LOCAL_BROKER_CONFIG": "\n".join(
        [
            "delegation.token.secret.key=kafka-share-test-token-key",
            "listener.name.kerberos.sasl.enabled.mechanisms=GSSAPI,SCRAM-SHA-512",
            "listener.name.kerberos.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            # A token outlives few batches, and a session none: a client must log in with the newest.
            f"delegation.token.expiry.time.ms={TOKEN_LIFETIME_S * 1000}",
            "delegation.token.expiry.check.interval.ms=1000",
            "connections.max.reauth.ms=5000",
        ]
    ),
}
TOKEN_DRAIN = Path(__file__).parent / "jobs" / "token_drain.py"


@pytest.fixture(scope="module")
def token_broker(spark: SparkSession) -> Iterator[KafkaCluster]:
    kdc_env = {**os.environ, "KDC_LOCAL_DIR": str(KDC_DIR)}
    broker_env = {**os.environ, **BROKER_ENV}
    subprocess.run([str(KDC_LOCAL), "start"], check=True, timeout=300, env=kdc_env)
    try:
        subprocess.run([str(KAFKA_LOCAL), "start"], check=True, timeout=300, env=broker_env)
        try:
            yield KafkaCluster(PLAINTEXT, AdminClient({"bootstrap.servers": PLAINTEXT}), spark)
        finally:
            subprocess.run([str(KAFKA_LOCAL), "stop"], check=True, timeout=300, env=broker_env)
    finally:
        subprocess.run([str(KDC_LOCAL), "stop"], check=True, timeout=120, env=kdc_env)


def tokens_held(out: Path) -> list[dict[str, Any]]:
    """The job's tokens.json: the tokens the driver held, each with those the broker held then."""
    path = out / "tokens.json"
    return json.loads(path.read_text()) if path.exists() else []


def tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text().splitlines()[-lines:])


@pytest.mark.extended
@pytest.mark.parametrize(
    "master",
    [
        pytest.param("local-cluster-with-token-manager[2,1,1024]", id="executors-in-own-jvms"),
        pytest.param("local[2]", id="local-mode"),
    ],
)
def test_a_query_logs_in_with_the_tokens_spark_obtains(
    token_broker: KafkaCluster, master: str, tmp_path: Path
) -> None:
    first, second = values(200, "a"), values(200, "b")
    topic = token_broker.topic_with(first, partitions=2)
    group = f"g-token-{tmp_path.name[-8:]}"
    out = tmp_path / "out"
    command = [
        sys.executable,
        str(TOKEN_DRAIN),
        *("--master", master, "--bootstrap", SASL, "--topic", topic, "--group", group),
        *(
            "--expected",
            str(len(first) + len(second)),
            "--jar",
            JAR,
            "--kdc-dir",
            str(KDC_DIR),
            "--out",
            str(out),
        ),
    ]
    python_path = os.pathsep.join(p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH")) if p)
    out.mkdir()
    driver_log = (out / "driver.log").open("w")
    job = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": python_path}, stderr=driver_log)
    try:
        # The second half is produced once the first token has expired: only a newer one reads it.
        deadline = time.monotonic() + 180
        while len(tokens_held(out)) < 3 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        tokens = tokens_held(out)
        assert len(tokens) >= 3, (
            f"Spark obtained {len(tokens)} Kafka tokens, not a new one before each expired"
        )
        assert tokens[0]["id"] not in tokens[2]["live_on_broker"], "the first token had not expired"
        token_broker.produce(topic, second)
        assert job.wait(timeout=300) == 0, f"the job failed: {tail(out / 'driver.log')}"
    finally:
        if job.poll() is None:
            job.kill()
        driver_log.close()

    wanted = 3 if master.startswith("local-cluster") else 1
    assert json.loads((out / "executors.json").read_text()) == wanted, "JVMs: the driver and its executors"
    # Each client logs in with the newest token before its session ends, never with an expired one.
    logs = [out / "driver.log", *(out / "executor-work").rglob("stderr")]
    refused = [
        line
        for log in logs
        for line in log.read_text().splitlines()
        if "failed authentication" in line.lower()
    ]
    assert not refused, f"clients were refused a login: {refused[:3]}"
    got = json.loads((out / "values.json").read_text())
    assert_every_record_once(
        first + second,
        got,
        kafka=token_broker,
        group=group,
        topic=topic,
        context="read with Spark's Kafka tokens",
    )
