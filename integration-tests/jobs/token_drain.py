"""Drains a topic with kafka-share on executors in JVMs of their own (local-cluster) that hold no
keytab and no login settings: they log in with the Kafka delegation token Spark ships them
(test_spark_tokens.py).

Spark's token manager runs only under YARN and Kubernetes (local-cluster's scheduler backend
creates none), so the driver gets a real token itself: it asks the broker for one with Kafka's Admin
API over GSSAPI, from a keytab only the driver has, and hands it to Spark's scheduler backend
(`updateDelegationTokens`), which puts it in the driver's credentials and ships it to every executor
as Spark's token manager would, under Spark's alias `kafka.server.delegation.token.<cluster>`.
Writes the values read to `<out>/values.json`, the token's id to `<out>/token-id`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pyspark.sql import SparkSession

SHADED = "io.github.sparkkafkashare.shaded.kafka"
CLUSTER = "local"

parser = argparse.ArgumentParser()
parser.add_argument("--bootstrap", required=True, help="the SASL listener with GSSAPI and SCRAM")
parser.add_argument("--topic", required=True)
parser.add_argument("--group", required=True)
parser.add_argument("--expected", type=int, required=True)
parser.add_argument("--jar", required=True)
parser.add_argument("--kdc-dir", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--conf", action="append", default=[], help="key=value, another Spark conf")


def obtain_token(spark: SparkSession, bootstrap: str, kdc: Path) -> tuple[str, bytes]:
    """A delegation token for alice, from the broker over GSSAPI (the driver's keytab)."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.setProperty("java.security.krb5.conf", str(kdc / "krb5.conf"))
    props = jvm.java.util.Properties()
    login = "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true"
    login += f' keyTab="{kdc / "kafka.keytab"}" principal="alice@EXAMPLE.COM";'
    for key, value in {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        "sasl.jaas.config": login,
    }.items():
        props.setProperty(key, value)
    admin = getattr(jvm, SHADED).clients.admin.Admin.create(props)
    try:
        token = admin.createDelegationToken().delegationToken().get()
        return token.tokenInfo().tokenId(), bytes(token.hmac())
    finally:
        admin.close()


def ship_token(spark: SparkSession, token_id: str, hmac: bytes) -> None:
    """The token into Spark's credentials, as Spark's Kafka token provider leaves it."""
    jvm = spark.sparkContext._jvm
    text = jvm.org.apache.hadoop.io.Text
    token = jvm.org.apache.hadoop.security.token.Token(
        bytearray(token_id.encode()), bytearray(hmac), text("KAFKA_DELEGATION_TOKEN"), text("kafka")
    )
    credentials = jvm.org.apache.hadoop.security.Credentials()
    credentials.addToken(text(f"kafka.server.delegation.token.{CLUSTER}"), token)
    serialized = jvm.org.apache.spark.deploy.SparkHadoopUtil.get().serialize(credentials)
    spark.sparkContext._jsc.sc().schedulerBackend().updateDelegationTokens(serialized)


def main() -> None:
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("kafka-share-spark-token")
        .config("spark.jars", args.jar)
        .config("spark.ui.enabled", "false")
        .config(f"spark.kafka.clusters.{CLUSTER}.auth.bootstrap.servers", args.bootstrap)
        .config(f"spark.kafka.clusters.{CLUSTER}.target.bootstrap.servers.regex", args.bootstrap)
        .config(f"spark.kafka.clusters.{CLUSTER}.security.protocol", "SASL_PLAINTEXT")
        .config(f"spark.kafka.clusters.{CLUSTER}.sasl.token.mechanism", "SCRAM-SHA-512")
    )
    for pair in args.conf:
        builder = builder.config(*pair.split("=", 1))
    spark = builder.getOrCreate()
    token_id, hmac = obtain_token(spark, args.bootstrap, Path(args.kdc_dir))
    (out / "token-id").write_text(token_id)
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    deadline = time.monotonic() + 120
    while status.size() < 3 and time.monotonic() < deadline:  # the driver and both executors
        time.sleep(0.5)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    ship_token(spark, token_id, hmac)

    # Only the servers and the group: the login comes from the token.
    df = (
        spark.readStream.format("kafka-share")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("kafka.share.group.id", args.group)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("kafka.share.parallelism", "2")
        .option("kafka.default.api.timeout.ms", "30000")
        .load()
    )
    got: list[str] = []

    def write(batch, _batch_id: int) -> None:
        got.extend(r.value for r in batch.selectExpr("CAST(value AS STRING) AS value").collect())

    query = (
        df.writeStream.foreachBatch(write)
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    query.stop()
    (out / "values.json").write_text(json.dumps(got))
    (out / "executors.json").write_text(json.dumps(status.size()))
    spark.stop()


if __name__ == "__main__":
    main()
