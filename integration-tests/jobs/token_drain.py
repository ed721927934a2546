"""Reads a topic with kafka-share whose only login is the Kafka delegation token Spark obtains
(test_spark_tokens.py): no login options, no JAAS file, no keytab or Kerberos settings on the executors.

Spark's own token manager obtains the token, with Spark's Kafka token provider
(spark-token-provider-kafka, as a user adds it), logging in with the driver's keytab
(`spark.kerberos.keytab`), and obtains a new one before each expires. Spark 4.3's local mode runs that
manager; executors in JVMs of their own get it from `local-cluster-with-token-manager[...]`
(jvm-helpers' LocalClusterWithTokenManager: Spark's local-cluster with the manager YARN's scheduler
backend starts). Every JVM knows the realm (krb5.conf), as on a Kerberized cluster's nodes.

The query runs until it has read `--expected` records or `--timeout` passes. Writes the values read to
`<out>/values.json`, the number of JVMs (driver and executors) to `<out>/executors.json`,
`<out>/tokens.json`: the tokens the driver held, in order, each with the ids of the tokens the broker
held when the driver first had it, and the executors' logs to `<out>/executor-work/`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from drain_topic import sbt_project_jars
from kafka_tokens import CLUSTER, PRINCIPAL, live_token_ids, token_id
from pyspark.sql import SparkSession
from secrets_audit import copy_executor_files

parser = argparse.ArgumentParser()
parser.add_argument("--master", required=True, help="local[N] or local-cluster-with-token-manager[N,C,M]")
parser.add_argument("--bootstrap", required=True, help="the SASL listener with GSSAPI and SCRAM")
parser.add_argument("--topic", required=True)
parser.add_argument("--group", required=True)
parser.add_argument("--expected", type=int, required=True)
parser.add_argument("--timeout", type=float, default=240, help="seconds")
parser.add_argument("--jar", required=True)
parser.add_argument("--kdc-dir", required=True)
parser.add_argument("--out", required=True)

CORE_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>hadoop.security.authentication</name><value>kerberos</value></property>
</configuration>
"""


def session(args: argparse.Namespace, out: Path) -> SparkSession:
    """A Kerberos-secured Spark application, as on YARN: Hadoop's security on, the driver's keytab."""
    kdc = Path(args.kdc_dir)
    hadoop_conf = out / "hadoop-conf"
    hadoop_conf.mkdir(exist_ok=True)
    (hadoop_conf / "core-site.xml").write_text(CORE_SITE)
    os.environ["HADOOP_CONF_DIR"] = str(hadoop_conf)  # on the classpath of every JVM spark-submit starts
    jars = [args.jar, *sbt_project_jars("sparkKafkaSource", "spark-sql-kafka-0-10_")]  # the token provider
    jars += sbt_project_jars("jvmHelpers", "jvm-helpers-")
    builder = (
        SparkSession.builder.master(args.master)
        .appName("kafka-share-spark-token")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Djava.security.krb5.conf={kdc / 'krb5.conf'}")
        .config("spark.executor.extraJavaOptions", f"-Djava.security.krb5.conf={kdc / 'krb5.conf'}")
        .config("spark.kerberos.principal", PRINCIPAL)
        .config("spark.kerberos.keytab", str(kdc / "kafka.keytab"))
        .config(f"spark.kafka.clusters.{CLUSTER}.auth.bootstrap.servers", args.bootstrap)
        .config(f"spark.kafka.clusters.{CLUSTER}.target.bootstrap.servers.regex", args.bootstrap)
        .config(f"spark.kafka.clusters.{CLUSTER}.security.protocol", "SASL_PLAINTEXT")
        .config(f"spark.kafka.clusters.{CLUSTER}.sasl.token.mechanism", "SCRAM-SHA-512")
    )
    return builder.getOrCreate()


def main() -> None:
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spark = session(args, out)
    jvms = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    wanted = 3 if args.master.startswith("local-cluster") else 1  # the driver and both executors
    deadline = time.monotonic() + 120
    while jvms().size() < wanted and time.monotonic() < deadline:
        time.sleep(0.5)
    (out / "executors.json").write_text(json.dumps(jvms().size()))

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
        .trigger(processingTime="1 second")
        .start()
    )
    tokens: list[dict[str, object]] = []
    deadline = time.monotonic() + args.timeout
    try:
        while len(got) < args.expected and query.isActive and time.monotonic() < deadline:
            current = token_id(spark)
            if current and current not in [t["id"] for t in tokens]:
                live = live_token_ids(spark, args.bootstrap, Path(args.kdc_dir))
                tokens.append({"id": current, "live_on_broker": live})
                (out / "tokens.json.tmp").write_text(json.dumps(tokens))
                os.replace(out / "tokens.json.tmp", out / "tokens.json")  # whole, for the test reading it
            time.sleep(0.5)
        time.sleep(2)  # a record read twice shows in a batch after the last expected one
    finally:
        query.stop()
        failure = query.exception()
        (out / "values.json").write_text(json.dumps(got))
        spark_home = Path(str(spark.sparkContext._jvm.java.lang.System.getenv("SPARK_HOME")))
        work = spark_home / "work" / spark.sparkContext.applicationId
        spark.stop()
        if work.exists():  # local-cluster's executors
            copy_executor_files(work, out)
    if failure:
        raise SystemExit(f"the query failed: {failure}")


if __name__ == "__main__":
    main()
