"""Security settings as a user writes them, against the local broker's SASL listeners
(dev/kafka-local: SASL_PLAINTEXT with mechanism PLAIN; SASL_SSL with SCRAM-SHA-512 and a self-signed
certificate; user alice on both). The assembly shades kafka-clients, which renames Kafka's classes and
the system properties its client reads; the source maps Kafka's own names to the shaded ones
(ShadedKafkaNames), and these tests fail if it does not."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_kafka_share import KafkaShareConfigurationError, from_jvm_error, release_or_dead_letter

from conftest import (
    BOOTSTRAP,
    JAR,
    KAFKA_LOCAL_STATE,
    KafkaCluster,
    acknowledged,
    drain_values,
    drained_rows,
    run_drain_job,
    share_stream,
    source_metrics,
    values,
    wait_until,
)
from expectations import assert_every_record_once


def listener(port_variable: str, above_plaintext: int) -> str:
    """The address of a listener of dev/kafka-local: on the port `port_variable` names, by default
    `above_plaintext` above the plaintext listener's port."""
    host, port = BOOTSTRAP.split(",")[0].rsplit(":", 1)
    return f"{host}:{os.environ.get(port_variable) or int(port) + above_plaintext}"


# dev/kafka-local's SASL listener, with mechanism PLAIN.
SASL_BOOTSTRAP = listener("KAFKA_SASL_PORT", 2)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
# dev/kafka-local's SASL_SSL listener, with mechanisms SCRAM-SHA-512 and OAUTHBEARER.
SSL_BOOTSTRAP = listener("KAFKA_SSL_PORT", 3)
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
# dev/kafka-local's SSL listener, which requires a client certificate (mutual TLS).
MTLS_BOOTSTRAP = listener("KAFKA_MTLS_PORT", 4)
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
OAUTH_ALLOWED_URLS = "sasl.oauthbearer.allowed.urls"
# dev/kafka-local's TLS material (what trusts its listeners' certificate, alice's client certificate),
# and the password of its stores.
TLS_DIR = KAFKA_LOCAL_STATE / "tls"
TLS_PASSWORD = "kafka-local-tls"
SHADED_PACKAGE = "io.github.sparkkafkashare.shaded.kafka"
ALLOWED_LOGIN_MODULES = "allowed.login.modules"


def alice_login(login_module: str, password: str) -> str:
    """A `kafka.sasl.jaas.config` value that logs in as alice with `password`."""
    return f'{login_module} required username="alice" password="{password}";'


def login_stream(
    spark: SparkSession, topic: str, group: str, bootstrap: str, mechanism: str, login: str, **settings: str
) -> DataFrame:
    """A stream of `topic` through the SASL listener at `bootstrap` (SASL_SSL on SSL_BOOTSTRAP,
    SASL_PLAINTEXT otherwise), logging in with `mechanism` and the JAAS line `login`."""
    protocol = "SASL_SSL" if bootstrap == SSL_BOOTSTRAP else "SASL_PLAINTEXT"
    return share_stream(
        spark,
        topic,
        group,
        **{
            "kafka.bootstrap.servers": bootstrap,
            "kafka.security.protocol": protocol,
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.jaas.config": login,
            **settings,
        },
    )


def sasl_stream(
    spark: SparkSession,
    topic: str,
    group: str,
    password: str,
    starting_offsets: str | None = "earliest",
    **options: str,
) -> DataFrame:
    """A stream of `topic` through the SASL_PLAINTEXT listener, as alice with mechanism PLAIN; without
    `starting_offsets`, the group starts where its own config says."""
    starting = {} if starting_offsets is None else {"startingOffsets": starting_offsets}
    login = alice_login(PLAIN_LOGIN_MODULE, password)
    return login_stream(spark, topic, group, SASL_BOOTSTRAP, "PLAIN", login, **starting, **options)


def pkcs12_file(store: str, file: str, password: str = TLS_PASSWORD) -> dict[str, str]:
    """Settings that name a PKCS12 file of dev/kafka-local's tls/ as the client's `store`
    (truststore or keystore)."""
    return {
        f"kafka.ssl.{store}.type": "PKCS12",
        f"kafka.ssl.{store}.location": str(TLS_DIR / file),
        f"kafka.ssl.{store}.password": password,
    }


def truststore(form: str, password: str = TLS_PASSWORD) -> dict[str, str]:
    """Settings that make a client trust the SASL_SSL listener's certificate: a PKCS12 truststore file
    (`pkcs12-file`), or the PEM certificate as the value itself (`pem-value`), as with a managed
    Kafka whose CA is handed out as text."""
    if form == "pkcs12-file":
        return pkcs12_file("truststore", "truststore.p12", password)
    assert form == "pem-value", form
    return {
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": (TLS_DIR / "ca.pem").read_text(),
    }


def keystore(form: str) -> dict[str, str]:
    """Settings that give a client alice's certificate, which the mutual-TLS listener trusts: a PKCS12
    keystore file (`pkcs12-file`), or the PEM certificate and private key as the values themselves
    (`pem-value`), as a managed Kafka hands them out."""
    if form == "pkcs12-file":
        return pkcs12_file("keystore", "client.p12")
    assert form == "pem-value", form
    return {
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": (TLS_DIR / "client-cert.pem").read_text(),
        "kafka.ssl.keystore.key": (TLS_DIR / "client-key.pem").read_text(),
    }


def mtls_stream(spark: SparkSession, topic: str, group: str, client: dict[str, str]) -> DataFrame:
    """A stream of `topic` from the start through the mutual-TLS listener, trusting the broker by
    truststore and showing it the client certificate of the `client` settings (`keystore`)."""
    settings = {"kafka.bootstrap.servers": MTLS_BOOTSTRAP, "kafka.security.protocol": "SSL"}
    settings |= {"startingOffsets": "earliest", **truststore("pkcs12-file"), **client}
    return share_stream(spark, topic, group, **settings)


def scram_ssl_stream(
    spark: SparkSession, topic: str, group: str, password: str, trust: dict[str, str], **options: str
) -> DataFrame:
    """A stream of `topic` through the SASL_SSL listener, as alice with SCRAM-SHA-512, trusting the
    broker's certificate with the `trust` settings (none: the JVM's default CAs)."""
    login = alice_login(SCRAM_LOGIN_MODULE, password)
    settings = {"startingOffsets": "earliest", **trust, **options}
    return login_stream(spark, topic, group, SSL_BOOTSTRAP, "SCRAM-SHA-512", login, **settings)


def oauth_settings(token_endpoint_url: str, secret: str) -> dict[str, str]:
    """Options that log in to the SASL_SSL listener with OAUTHBEARER, as with an identity provider:
    Kafka's login handler gets a token for client alice (client secret `secret`) from
    `token_endpoint_url`."""
    return {
        "kafka.bootstrap.servers": SSL_BOOTSTRAP,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.jaas.config": f'{OAUTH_LOGIN_MODULE} required clientId="alice" clientSecret="{secret}";',
        "kafka.sasl.login.callback.handler.class": OAUTH_LOGIN_HANDLER,
        "kafka.sasl.oauthbearer.token.endpoint.url": token_endpoint_url,
        **truststore("pem-value"),
    }


def oauth_ssl_stream(
    spark: SparkSession, topic: str, group: str, token_endpoint_url: str, secret: str
) -> DataFrame:
    """A stream of `topic` from the start, logging in with `oauth_settings`."""
    settings = oauth_settings(token_endpoint_url, secret)
    return share_stream(spark, topic, group, startingOffsets="earliest", **settings)


class TokenEndpoint:
    """An OAuth 2 token endpoint (client_credentials grant) on loopback, as an identity provider runs
    one: it gives client alice, secret `secret`, a JWT for subject alice signed with the key the
    local broker checks tokens with (dev/kafka-local's `tls_dir`/jwks.json); any other client gets
    HTTP 401. `tokens` are the JWTs it gave."""

    def __init__(self, secret: str = "alice-secret", tls_dir: Path = TLS_DIR) -> None:
        self.issued = 0
        self.refused = 0
        self.tokens: list[str] = []
        alice = "Basic " + base64.b64encode(f"alice:{secret}".encode()).decode()
        (key,) = json.loads((tls_dir / "jwks.json").read_text())["keys"]
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Authorization") == alice:
                    endpoint.issued += 1
                    endpoint.tokens.append(signed_jwt("alice", key))
                    status, body = 200, {"access_token": endpoint.tokens[-1], "token_type": "bearer"}
                else:
                    endpoint.refused += 1
                    status, body = 401, {"error": "invalid_client"}
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def signed_jwt(subject: str, key: dict[str, str]) -> str:
    """A JWT for `subject`, valid for an hour, signed (HS256) with the JSON Web Key `key`."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    header = {"alg": "HS256", "typ": "JWT", "kid": key["kid"]}
    claims = {"sub": subject, "iat": now, "exp": now + 3600}
    signed = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    secret = base64.urlsafe_b64decode(key["k"] + "=" * (-len(key["k"]) % 4))
    return f"{signed}.{b64(hmac.new(secret, signed.encode(), hashlib.sha256).digest())}"


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    endpoint = TokenEndpoint()
    yield endpoint
    endpoint.close()


def failure_of(df: DataFrame) -> StreamingQueryException:
    query = df.writeStream.format("noop").trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(120)
    return failure.value


@pytest.fixture
def system_properties(spark: SparkSession) -> Iterator[dict[str, str]]:
    """Kafka system properties to set on the driver JVM (the executors' too, in local mode) for one
    test, under Kafka's names; afterwards they are cleared under both names."""
    props: dict[str, str] = {}
    yield props
    system = spark.sparkContext._jvm.java.lang.System
    for name in props:
        system.clearProperty(f"org.apache.kafka.{name}")
        system.clearProperty(f"{SHADED_PACKAGE}.{name}")


def set_kafka_system_property(spark: SparkSession, props: dict[str, str], name: str, value: str) -> None:
    props[name] = value
    spark.sparkContext._jvm.java.lang.System.setProperty(f"org.apache.kafka.{name}", value)


def test_a_query_reads_through_sasl_with_kafkas_own_login_module_name(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # The shaded client has no class org.apache.kafka...PlainLoginModule: unmapped, the login fails.
    topic = kafka.topic_with(values(500), partitions=2)
    got = drain_values(spark, sasl_stream(spark, topic, group, "alice-secret"))
    assert_every_record_once(values(500), got, kafka=kafka, group=group, topic=topic, context="SASL listener")


@pytest.mark.parametrize("listener", ["sasl-plain", "scram-ssl"])
def test_a_wrong_password_fails_the_query_and_no_message_or_log_line_shows_it(
    spark: SparkSession, kafka: KafkaCluster, group: str, driver_log: Callable[[], str], listener: str
) -> None:
    topic = kafka.new_topic()
    password = f"wrong-{uuid.uuid4().hex}"
    if listener == "sasl-plain":
        bootstrap, df = SASL_BOOTSTRAP, sasl_stream(spark, topic, group, password)
    else:
        bootstrap, df = (
            SSL_BOOTSTRAP,
            scram_ssl_stream(spark, topic, group, password, truststore("pkcs12-file")),
        )
    failure = failure_of(df)
    message = str(failure)
    assert (
        f"[KAFKA_SHARE_AUTHENTICATION_FAILED] The Kafka cluster at {bootstrap} did not let the query"
        in message
    )
    assert "SaslAuthenticationException: Authentication failed" in message, message
    assert isinstance(from_jvm_error(failure), KafkaShareConfigurationError)
    assert password not in message
    assert password not in driver_log()


@pytest.mark.parametrize("form", ["pkcs12-file", "pem-value"])
def test_a_query_reads_through_sasl_ssl_with_scram_trusting_the_broker_by_truststore(
    spark: SparkSession, kafka: KafkaCluster, group: str, form: str
) -> None:
    # As with PLAIN, the shaded client has no class under Kafka's name of the SCRAM login module.
    topic = kafka.topic_with(values(500), partitions=2)
    df = scram_ssl_stream(spark, topic, group, "alice-secret", truststore(form))
    assert_every_record_once(
        values(500),
        drain_values(spark, df),
        kafka=kafka,
        group=group,
        topic=topic,
        context="SASL_SSL listener (a broker whose data predates its SCRAM account fails here: "
        "make kafka-down, then make kafka-up)",
    )


def test_a_broker_certificate_the_client_does_not_trust_fails_the_query_saying_why(
    spark: SparkSession, kafka: KafkaCluster, group: str, driver_log: Callable[[], str]
) -> None:
    # No truststore: the JVM's default CAs, which do not include the broker's self-signed certificate.
    topic = kafka.new_topic()
    failure = failure_of(scram_ssl_stream(spark, topic, group, "alice-secret", trust={}))
    message = str(failure)
    assert "[KAFKA_SHARE_AUTHENTICATION_FAILED]" in message, message
    # Kafka's own message says only "SSL handshake failed"; its cause says why.
    assert (
        "SslAuthenticationException: SSL handshake failed; caused by SSLHandshakeException: PKIX path"
        in message
    )
    assert "alice-secret" not in message
    assert "alice-secret" not in driver_log()


def test_a_wrong_truststore_password_fails_the_query_and_no_message_or_log_line_shows_it(
    spark: SparkSession, kafka: KafkaCluster, group: str, driver_log: Callable[[], str]
) -> None:
    topic = kafka.new_topic()
    password = f"wrong-{uuid.uuid4().hex}"
    failure = failure_of(
        scram_ssl_stream(spark, topic, group, "alice-secret", truststore("pkcs12-file", password))
    )
    message = str(failure)
    # What Kafka was doing, and why it failed; not the innermost cause alone ("failed to decrypt").
    loading = f"Failed to load SSL keystore {TLS_DIR / 'truststore.p12'} of type PKCS12"
    assert f"{loading}; caused by IOException: keystore password was incorrect" in message, message
    assert password not in message
    assert password not in driver_log()


@pytest.mark.parametrize("form", ["pkcs12-file", "pem-value"])
def test_a_query_reads_through_mutual_tls_with_a_client_certificate(
    spark: SparkSession, kafka: KafkaCluster, group: str, form: str
) -> None:
    topic = kafka.topic_with(values(300), partitions=2)
    got = drain_values(spark, mtls_stream(spark, topic, group, keystore(form)))
    assert_every_record_once(values(300), got, kafka=kafka, group=group, topic=topic, context="mutual TLS")


def test_a_query_without_the_client_certificate_mutual_tls_requires_fails_saying_the_login_was_refused(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.topic_with(values(10))
    message = str(failure_of(mtls_stream(spark, topic, group, {})))
    assert f"[KAFKA_SHARE_AUTHENTICATION_FAILED] The Kafka cluster at {MTLS_BOOTSTRAP}" in message, message
    assert "SslAuthenticationException" in message, message
    assert "Received fatal alert: bad_certificate" in message, message
    assert (
        "where the brokers require client certificates (mutual TLS), that 'kafka.ssl.keystore.*'" in message
    )
    assert kafka.total_lag(group) in (None, 10), "the query read nothing"


def test_records_dead_lettered_through_sasl_ssl_reach_the_dead_letter_topic(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    # The dead-letter producer, on the driver, connects with the source's kafka.* settings too.
    topic = kafka.new_topic(partitions=2)
    dead_letters = kafka.new_topic()
    expected = values(200)
    poison = expected[::50]
    kafka.produce(topic, expected)
    parked: list[int] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        failed = batch.filter(F.col("value").cast("string").isin(*poison))
        parked.append(release_or_dead_letter(batch, failed, max_deliveries=1, dead_letter_topic=dead_letters))

    df = scram_ssl_stream(
        spark,
        topic,
        group,
        "alice-secret",
        truststore("pem-value"),
        **{"kafka.share.acknowledgment.mode": "explicit"},
    )
    query = df.writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds").start()
    try:
        wait_until(
            lambda: query.exception() is not None or acknowledged(source_metrics(query)) >= len(expected),
            120,
            "every record accepted or dead-lettered",
        )
        assert query.exception() is None, str(query.exception())
    finally:
        query.stop()
    assert sum(parked) == len(poison)
    copies = kafka.consume_all(dead_letters, expected_count=len(poison))
    assert_every_record_once(
        poison, [c.value for c in copies], kafka=kafka, group=group, topic=topic, context="dead-letter topic"
    )


def test_a_query_reads_through_oauthbearer_once_kafkas_allowed_urls_property_names_the_token_endpoint(
    spark: SparkSession,
    kafka: KafkaCluster,
    group: str,
    system_properties: dict[str, str],
    token_endpoint: TokenEndpoint,
) -> None:
    topic = kafka.topic_with(values(300), partitions=2)
    df = oauth_ssl_stream(spark, topic, group, token_endpoint.url, "alice-secret")
    # Kafka's client (4.0 and later) fetches tokens only from URLs the operator allowed; its message
    # names the system property to set, under Kafka's name (the shaded client reads another).
    message = str(failure_of(df))
    assert (
        f"Invalid value {token_endpoint.url} for configuration sasl.oauthbearer.token.endpoint.url" in message
    )
    assert f"Update the system property 'org.apache.kafka.{OAUTH_ALLOWED_URLS}'" in message, message
    assert token_endpoint.issued == 0
    set_kafka_system_property(spark, system_properties, OAUTH_ALLOWED_URLS, token_endpoint.url)
    got = drain_values(spark, df)
    assert token_endpoint.issued >= 1, "the client logged in with a token from the endpoint"
    assert_every_record_once(values(300), got, kafka=kafka, group=group, topic=topic, context="OAUTHBEARER")


# Callback handlers of a package of their own, compiled against Kafka's unshaded kafka-clients as a
# cloud provider's are (integration-tests/provider-handlers, sbt project providerHandlers).
PROVIDER_HANDLER_JARS = "providerHandlers=provider-handlers-"


def drain_with_provider_handler(
    kafka: KafkaCluster, group: str, workdir: Path, settings: dict[str, str], *job_args: str
) -> None:
    """Drains a new topic of 200 records in a Spark application (jobs/drain_topic.py, with `job_args`)
    with the provider handlers and Kafka's unshaded kafka-clients on its classpath, logging in with
    `settings`; checks that every record came once and was acknowledged."""
    topic = kafka.topic_with(values(200), partitions=2)
    job = ["--sbt-jars", PROVIDER_HANDLER_JARS, *job_args]
    job += [f"--option={name}={value}" for name, value in settings.items()]
    failure = workdir / "out" / "failure.txt"
    exit_code = run_drain_job(topic, group, workdir, *job)
    assert exit_code == 0, failure.read_text() if failure.exists() else f"exit code {exit_code}"
    rows = drained_rows(workdir)
    assert_every_record_once(values(200), [value for value, _ in rows], kafka=kafka, group=group, topic=topic)


# local-cluster is extended: its executors log in as the driver does, once shipped the handler.
@pytest.mark.parametrize(
    "master", ["local[2]", pytest.param("local-cluster[2,1,1024]", marks=pytest.mark.extended)]
)
def test_a_providers_oauthbearer_login_handler_built_on_kafkas_own_classes_logs_in(
    kafka: KafkaCluster, group: str, token_endpoint: TokenEndpoint, tmp_path: Path, master: str
) -> None:
    # AWS MSK IAM's OAUTHBEARER setup: the provider's handler as the login and the SASL client
    # handler, answering Kafka's own token and SASL-extensions callbacks, which the shaded client's
    # login module and SASL client do not have. In local-cluster mode the executors' JVMs load it
    # from the jars Spark ships them.
    handler = "example.provider.ProviderTokenLoginHandler"
    settings = {
        **oauth_settings(token_endpoint.url, "alice-secret"),
        "kafka.sasl.login.callback.handler.class": handler,
        "kafka.sasl.client.callback.handler.class": handler,
    }
    allowed_urls = f"-Dorg.apache.kafka.{OAUTH_ALLOWED_URLS}={token_endpoint.url}"
    job = ["--master", master, "--spark-conf", f"spark.driver.extraJavaOptions={allowed_urls}"]
    job += ["--spark-conf", f"spark.executor.extraJavaOptions={allowed_urls}"]
    drain_with_provider_handler(kafka, group, tmp_path, settings, *job)
    assert token_endpoint.issued >= 1, "the provider's handler got the token"
    if master.startswith("local-cluster"):
        assert (tmp_path / "out" / "executors.txt").read_text() == "2"


def test_a_providers_sasl_client_handler_built_on_kafkas_own_classes_answers_the_mechanisms_callbacks(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    # The shape of AWS MSK IAM's AWS_MSK_IAM login: the provider's client handler gives the SASL
    # mechanism its credentials; PlainLoginModule has none of its own here.
    settings = {
        "kafka.bootstrap.servers": SASL_BOOTSTRAP,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN_LOGIN_MODULE} required provider_user="alice" '
        'provider_password="alice-secret";',
        "kafka.sasl.client.callback.handler.class": "example.provider.ProviderPlainClientHandler",
    }
    drain_with_provider_handler(kafka, group, tmp_path, settings)


def test_a_callback_handler_the_application_lacks_fails_naming_the_class_and_the_option(
    spark: SparkSession, kafka: KafkaCluster, group: str
) -> None:
    topic = kafka.new_topic()
    settings = {
        "kafka.bootstrap.servers": SASL_BOOTSTRAP,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN_LOGIN_MODULE} required username="alice" password="alice-secret";',
        "kafka.sasl.client.callback.handler.class": "example.provider.NotOnTheClasspath",
    }
    message = str(failure_of(share_stream(spark, topic, group, **settings)))
    assert "[KAFKA_SHARE_CLIENT_NOT_CREATED]" in message, message
    assert (
        "Class example.provider.NotOnTheClasspath of option 'kafka.sasl.client.callback.handler.class' "
        "could not be loaded" in message
    ), message
    assert "alice-secret" not in message


def test_a_client_secret_the_identity_provider_refuses_fails_the_query_and_no_message_or_log_line_shows_it(
    spark: SparkSession,
    kafka: KafkaCluster,
    group: str,
    system_properties: dict[str, str],
    token_endpoint: TokenEndpoint,
    driver_log: Callable[[], str],
) -> None:
    topic = kafka.new_topic()
    set_kafka_system_property(spark, system_properties, OAUTH_ALLOWED_URLS, token_endpoint.url)
    secret = f"wrong-{uuid.uuid4().hex}"
    message = str(failure_of(oauth_ssl_stream(spark, topic, group, token_endpoint.url, secret)))
    assert token_endpoint.refused >= 1
    assert token_endpoint.issued == 0
    assert "401" in message, message
    assert secret not in message
    assert secret not in driver_log()


def test_kafkas_allowed_login_modules_property_reaches_the_shaded_client(
    spark: SparkSession, kafka: KafkaCluster, group: str, system_properties: dict[str, str]
) -> None:
    topic = kafka.topic_with(values(100))
    # An operator's allow-list without PLAIN refuses the login, as it would with Kafka's own client.
    set_kafka_system_property(spark, system_properties, ALLOWED_LOGIN_MODULES, SCRAM_LOGIN_MODULE)
    failure = failure_of(sasl_stream(spark, topic, group, "alice-secret"))
    message = str(failure)
    assert "[KAFKA_SHARE_CLIENT_NOT_CREATED] Could not create Kafka's Admin client" in message, message
    assert "PlainLoginModule is not allowed" in message, message
    assert isinstance(from_jvm_error(failure), KafkaShareConfigurationError)
    # With PLAIN allowed under its own name, the query reads: the class names in the list are mapped too.
    set_kafka_system_property(
        spark, system_properties, ALLOWED_LOGIN_MODULES, f"{SCRAM_LOGIN_MODULE},{PLAIN_LOGIN_MODULE}"
    )
    assert drain_values(spark, sasl_stream(spark, topic, group, "alice-secret")) == values(100)


def test_the_source_mirrors_every_system_property_the_shaded_client_reads(spark: SparkSession) -> None:
    # The shader rewrote every string naming Kafka's package; those that name no class or package of
    # the jar are the system properties kafka-clients reads. A kafka-clients upgrade that adds one
    # fails here until ShadedKafkaNames.SystemProperties has it. The libraries kafka-clients shades
    # itself (under `shaded.`: commons-net's FTP settings from 4.4) read their own, not Kafka's.
    prefix = SHADED_PACKAGE.replace(".", "/") + "/"
    with zipfile.ZipFile(JAR) as jar:
        entries = set(jar.namelist())
        classes = [n for n in entries if n.startswith(prefix) and n.endswith(".class")]
        strings = {
            m.decode()
            for n in classes
            for m in re.findall(rb"io\.github\.sparkkafkashare\.shaded\.kafka\.[A-Za-z0-9_.]+", jar.read(n))
        }
    packages = {n.rsplit("/", k)[0] for n in entries for k in range(1, n.count("/") + 1)}
    read_by_client = {
        s[len(SHADED_PACKAGE) + 1 :]
        for s in strings
        if f"{s.replace('.', '/')}.class" not in entries
        and s.replace(".", "/") not in packages
        and not s.startswith(f"{SHADED_PACKAGE}.shaded.")
    }
    mirrored = spark.sparkContext._jvm.io.github.sparkkafkashare.clients.ShadedKafkaNames.SystemProperties()
    assert read_by_client == set(mirrored.mkString(",").split(","))
