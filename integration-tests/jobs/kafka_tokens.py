"""Kafka delegation tokens on the driver of a job, through Kafka's Admin API logged in as alice over
GSSAPI (the realm's keytab): the id of the one Spark holds and of those the broker still accepts
(token_drain.py), and a token
the driver hands to Spark itself (secrets_audit.py, which needs one it chooses: a real one and one the
broker refuses; Spark's token manager would ship neither on cue).

`ship_token` hands a token to Spark's scheduler backend (`updateDelegationTokens`), which puts it in
the driver's credentials and ships it to every executor, stored as Spark's Kafka token provider
stores it.
"""

from __future__ import annotations

import base64
from pathlib import Path

from py4j.java_gateway import JavaObject
from pyspark.sql import SparkSession

SHADED = "io.github.sparkkafkashare.shaded.kafka"
CLUSTER = "local"  # the jobs' spark.kafka.clusters.<id>
PRINCIPAL = "alice@EXAMPLE.COM"
ALIAS = f"kafka.server.delegation.token.{CLUSTER}"  # Spark's, in the Hadoop credentials


def kerberos_admin(spark: SparkSession, bootstrap: str, kdc: Path) -> JavaObject:
    """Kafka's Admin client on the driver, logged in as alice over GSSAPI; the caller closes it."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.setProperty("java.security.krb5.conf", str(kdc / "krb5.conf"))
    props = jvm.java.util.Properties()
    login = "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true"
    login += f' keyTab="{kdc / "kafka.keytab"}" principal="{PRINCIPAL}";'
    for key, value in {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        "sasl.jaas.config": login,
    }.items():
        props.setProperty(key, value)
    return getattr(jvm, SHADED).clients.admin.Admin.create(props)


def obtain_token(spark: SparkSession, bootstrap: str, kdc: Path) -> tuple[str, bytes]:
    """A delegation token for alice, from the broker: its id and HMAC."""
    admin = kerberos_admin(spark, bootstrap, kdc)
    try:
        token = admin.createDelegationToken().delegationToken().get()
        return token.tokenInfo().tokenId(), bytes(token.hmac())
    finally:
        admin.close()


def token_id(spark: SparkSession) -> str | None:
    """The id of the Kafka token in the driver's credentials, if Spark holds one."""
    jvm = spark.sparkContext._jvm
    credentials = jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser().getCredentials()
    token = credentials.getToken(jvm.org.apache.hadoop.io.Text(ALIAS))
    return None if token is None else bytes(token.getIdentifier()).decode()


def live_token_ids(spark: SparkSession, bootstrap: str, kdc: Path) -> list[str]:
    """The ids of alice's tokens the broker holds: it drops each once it expired."""
    admin = kerberos_admin(spark, bootstrap, kdc)
    try:
        tokens = admin.describeDelegationToken().delegationTokens().get()
        return sorted(token.tokenInfo().tokenId() for token in tokens)
    finally:
        admin.close()


def ship_token(spark: SparkSession, token_id: str, hmac: bytes) -> None:
    """The token into Spark's credentials under Spark's alias, its password the HMAC in base64 (as
    Spark's provider stores it), shipped to every executor."""
    jvm = spark.sparkContext._jvm
    text = jvm.org.apache.hadoop.io.Text
    password = base64.b64encode(hmac)
    token = jvm.org.apache.hadoop.security.token.Token(
        bytearray(token_id.encode()), bytearray(password), text("KAFKA_DELEGATION_TOKEN"), text("kafka")
    )
    credentials = jvm.org.apache.hadoop.security.Credentials()
    credentials.addToken(text(ALIAS), token)
    serialized = jvm.org.apache.spark.deploy.SparkHadoopUtil.get().serialize(credentials)
    spark.sparkContext._jsc.sc().schedulerBackend().updateDelegationTokens(serialized)
