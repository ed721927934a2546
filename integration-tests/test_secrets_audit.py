"""No secret of a login reaches a file of the Spark application, in any of its JVMs (issue 76).

A Spark application (jobs/secrets_audit.py) with executors in JVMs of their own runs a kafka-share
query for each mechanism the source logs in with, once with the right secret and once with a wrong or
refused one: SASL PLAIN, SCRAM-SHA-512 over SASL_SSL, OAUTHBEARER with a client secret, mutual TLS
with keystore, key and truststore passwords, GSSAPI with a keytab, and a Kafka delegation token that
Spark ships to the executors; and mutual TLS once more with the PEM private key as the value of
`kafka.ssl.keystore.key`. Every JVM logs Kafka's clients (shaded and not) and the source at DEBUG to a
file of its own (jobs/log4j2-audit.properties); Spark's event log is on; each query's plans, progress
and checkpoint are kept. Then every file the application wrote is searched for every secret's literal
value, and the test fails on a hit, naming the file and the line with the secret masked. The
application runs twice: on `local-cluster[2,1,1024]`, and submitted to a standalone cluster of two
workers (standalone_cluster.py), whose daemons' logs and executors' stdout and stderr are searched too.

The secrets are random per module where the broker lets them be: PLAIN's password (the broker's
JAAS config, set at start), SCRAM users made through the Admin API, the token endpoint's client
secret, copies of the TLS stores with new passwords, the broker's delegation-token key. A keytab has
no password: its keys are searched for, as hex and base64, and so is each run's JAAS entry.

A run that fails to log in fails on the driver, whose Admin client logs in first: the executors get
no task of it. The broker, the KDC and the token endpoint are the module's own, on ports other than
the shared broker's. The module takes five to ten minutes on 2 cores, so only `make test-extended` runs
it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from pyspark.sql import SparkSession

from conftest import JAR, KAFKA_LOCAL, REPO, KafkaCluster, values
from standalone_cluster import StandaloneCluster, spark_env, spark_submit, standalone_cluster
from test_kerberos import KRB5_LOGIN_MODULE
from test_security import (
    OAUTH_LOGIN_HANDLER,
    OAUTH_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    TokenEndpoint,
)

pytestmark = pytest.mark.extended

KDC_LOCAL = REPO / "dev" / "kdc-local" / "kdc-local"
STATE = REPO / "target" / "secrets-audit"
KDC_DIR = STATE / "kdc"
# The shared broker's ports (9092-9097) and test_spark_tokens.py's (19292-19297) stay untouched.
PORT = int(os.environ.get("SECRETS_AUDIT_KAFKA_PORT", "19392"))
PLAINTEXT, PLAIN_SASL, SASL_SSL, MTLS, KERBEROS = (f"localhost:{PORT + n}" for n in (0, 2, 3, 4, 5))
TLS_DIR = STATE / "kafka" / "tls"
TLS_PASSWORD = "kafka-local-tls"  # dev/kafka-local's stores, copied with random passwords below
PLAIN_PASSWORD = f"plain-{secrets.token_hex(16)}"
TOKEN_KEY = f"token-key-{secrets.token_hex(16)}"
LOG4J2 = Path(__file__).parent / "jobs" / "log4j2-audit.properties"
JOB = Path(__file__).parent / "jobs" / "secrets_audit.py"
RECORDS = 40
# The standalone cluster of the running audit, stopped once its job ended.
STANDALONE: list[StandaloneCluster] = []
# Kafka's shaded client logs under the source's package; its unshaded name is searched too.
SHADED = "io.github.sparkkafkashare.shaded.kafka"


def broker_env() -> dict[str, str]:
    config = [
        # PLAIN's only account: alice, with this module's password (the line overrides kafka-local's).
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        f'{PLAIN_LOGIN_MODULE} required user_alice="{PLAIN_PASSWORD}";',
        f"delegation.token.secret.key={TOKEN_KEY}",
        # Delegation tokens log in with SCRAM: on the GSSAPI listener, as in test_spark_tokens.py.
        "listener.name.kerberos.sasl.enabled.mechanisms=GSSAPI,SCRAM-SHA-512",
        f"listener.name.kerberos.scram-sha-512.sasl.jaas.config={SCRAM_LOGIN_MODULE} required;",
    ]
    return {
        **os.environ,
        "KAFKA_PORT": str(PORT),
        "KAFKA_CONTROLLER_PORT": str(PORT + 1),
        "KAFKA_DATA_DIR": str(STATE / "kafka" / "data"),
        "KAFKA_LOCAL_KERBEROS": str(KDC_DIR),
        "KAFKA_LOCAL_BROKER_CONFIG": "\n".join(config),
    }


def random_secret(what: str) -> str:
    return f"{what}-{secrets.token_hex(16)}"


def jaas(module: str, user: str, password: str) -> str:
    return f'{module} required username="{user}" password="{password}";'


def keytool(*args: str) -> None:
    subprocess.run(["keytool", "-noprompt", *args], check=True, capture_output=True, timeout=120)


def trust_store(directory: Path, password: str) -> dict[str, str]:
    """A copy of kafka-local's truststore under `password`, as the client's truststore settings."""
    store = directory / f"trust-{secrets.token_hex(4)}.p12"
    keytool(
        "-importkeystore",
        *("-srckeystore", str(TLS_DIR / "truststore.p12"), "-srcstoretype", "PKCS12"),
        *("-srcstorepass", TLS_PASSWORD, "-destkeystore", str(store), "-deststoretype", "PKCS12"),
        *("-deststorepass", password),
    )
    return {
        "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.location": str(store),
        "kafka.ssl.truststore.password": password,
    }


def key_store(directory: Path, store_password: str, key_password: str) -> dict[str, str]:
    """A JKS copy of alice's client keystore with passwords of its own for the store and the key (a
    PKCS12 store has one password for both)."""
    store = directory / f"client-{secrets.token_hex(4)}.jks"
    keytool(
        "-importkeystore",
        *("-srckeystore", str(TLS_DIR / "client.p12"), "-srcstoretype", "PKCS12"),
        *("-srcstorepass", TLS_PASSWORD, "-srcalias", "alice", "-destalias", "alice"),
        *("-destkeystore", str(store), "-deststoretype", "JKS", "-deststorepass", store_password),
        *("-destkeypass", key_password),
    )
    return {
        "kafka.ssl.keystore.type": "JKS",
        "kafka.ssl.keystore.location": str(store),
        "kafka.ssl.keystore.password": store_password,
        "kafka.ssl.key.password": key_password,
    }


def keytab_keys(keytab: Path) -> list[bytes]:
    """The keys of a keytab file (MIT format 0x502): what a Kerberos login from it proves itself with."""
    data = keytab.read_bytes()
    assert data[:2] == b"\x05\x02", "a keytab of format 0x502"
    keys, at = [], 2
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big", signed=True)
        entry, at = data[at + 4 : at + 4 + abs(size)], at + 4 + abs(size)
        if size <= 0:
            continue  # a deleted entry
        components = int.from_bytes(entry[0:2], "big")
        p = 2 + 2 + int.from_bytes(entry[2:4], "big")  # the realm
        for _ in range(components):
            p += 2 + int.from_bytes(entry[p : p + 2], "big")
        p += 4 + 4 + 1 + 2  # name type, timestamp, key version, encryption type
        length = int.from_bytes(entry[p : p + 2], "big")
        keys.append(entry[p + 2 : p + 2 + length])
    return keys


def encodings(key: bytes) -> dict[str, str]:
    return {"hex": key.hex(), "HEX": key.hex().upper(), "base64": base64.b64encode(key).decode()}


@dataclass
class Run:
    """One query of the job: its options, the secrets no file may hold, whether it should read."""

    name: str
    options: dict[str, str]
    secrets: dict[str, str] = field(default_factory=dict)
    reads: bool = True
    token: str | None = None


@dataclass
class Hit:
    file: Path
    line_number: int
    line: str


@dataclass
class Audit:
    directory: Path
    runs: dict[str, Run]
    hits: dict[str, list[tuple[str, Hit]]]
    files: list[Path]
    seconds: float


def the_runs(work: Path, admin: AdminClient, endpoint_url: str, client_secret: str) -> list[Run]:
    """Each mechanism's run with the right secret, then with a wrong one."""
    trust_password = random_secret("trust")
    trust = trust_store(work, trust_password)
    runs: list[Run] = []

    def add(name: str, options: dict[str, str], found: dict[str, str], token: str | None = None) -> None:
        """A run; its secrets are `found`, its options' JAAS entry and passwords."""
        named = {k: v for k, v in options.items() if k.endswith(("jaas.config", "password"))}
        runs.append(Run(name, options, {**found, **named}, not name.endswith("-refused"), token))

    plain = {"kafka.bootstrap.servers": PLAIN_SASL, "kafka.security.protocol": "SASL_PLAINTEXT"}
    plain["kafka.sasl.mechanism"] = "PLAIN"
    add("plain", {**plain, "kafka.sasl.jaas.config": jaas(PLAIN_LOGIN_MODULE, "alice", PLAIN_PASSWORD)}, {})
    wrong = random_secret("plain-wrong")
    add("plain-refused", {**plain, "kafka.sasl.jaas.config": jaas(PLAIN_LOGIN_MODULE, "alice", wrong)}, {})

    user, password = f"audit-{secrets.token_hex(4)}", random_secret("scram")
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    scram = {"kafka.bootstrap.servers": SASL_SSL, "kafka.security.protocol": "SASL_SSL", **trust}
    scram["kafka.sasl.mechanism"] = "SCRAM-SHA-512"
    add("scram", {**scram, "kafka.sasl.jaas.config": jaas(SCRAM_LOGIN_MODULE, user, password)}, {})
    wrong = random_secret("scram-wrong")
    add("scram-refused", {**scram, "kafka.sasl.jaas.config": jaas(SCRAM_LOGIN_MODULE, user, wrong)}, {})

    oauth = {"kafka.bootstrap.servers": SASL_SSL, "kafka.security.protocol": "SASL_SSL", **trust}
    oauth |= {
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.login.callback.handler.class": OAUTH_LOGIN_HANDLER,
        "kafka.sasl.oauthbearer.token.endpoint.url": endpoint_url,
    }
    login = f'{OAUTH_LOGIN_MODULE} required clientId="alice" clientSecret="%s";'
    add("oauth", {**oauth, "kafka.sasl.jaas.config": login % client_secret}, {"client secret": client_secret})
    wrong = random_secret("oauth-wrong")
    add("oauth-refused", {**oauth, "kafka.sasl.jaas.config": login % wrong}, {"client secret": wrong})

    mtls = {"kafka.bootstrap.servers": MTLS, "kafka.security.protocol": "SSL", **trust}
    store_password, key_password = random_secret("keystore"), random_secret("key")
    add("mtls", {**mtls, **key_store(work, store_password, key_password)}, {})
    # The certificate and private key as the values themselves, as a managed Kafka hands them out.
    pem = {"kafka.ssl.keystore.type": "PEM"}
    pem["kafka.ssl.keystore.key"] = (TLS_DIR / "client-key.pem").read_text()
    pem["kafka.ssl.keystore.certificate.chain"] = (TLS_DIR / "client-cert.pem").read_text()
    key_lines = [line for line in pem["kafka.ssl.keystore.key"].splitlines() if "-----" not in line]
    add("mtls-pem", {**mtls, **pem}, {f"private key line {i}": line for i, line in enumerate(key_lines)})
    # The store opens, its key does not: the client cannot show its certificate.
    refused = key_store(work, random_secret("keystore"), random_secret("key"))
    refused["kafka.ssl.key.password"] = random_secret("key-wrong")
    add("mtls-refused", {**mtls, **refused}, {})

    keytab = KDC_DIR / "kafka.keytab"
    keys = {
        f"keytab key {i} ({form})": e
        for i, k in enumerate(keytab_keys(keytab))
        for form, e in encodings(k).items()
    }
    gssapi = {"kafka.bootstrap.servers": KERBEROS, "kafka.security.protocol": "SASL_PLAINTEXT"}
    gssapi |= {"kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.kerberos.service.name": "kafka"}
    login = f'{KRB5_LOGIN_MODULE} required useKeyTab=true storeKey=true keyTab="{keytab}" principal="%s";'
    add("gssapi", {**gssapi, "kafka.sasl.jaas.config": login % "alice@EXAMPLE.COM"}, keys)
    add("gssapi-refused", {**gssapi, "kafka.sasl.jaas.config": login % "bob@EXAMPLE.COM"}, keys)

    # Only the servers: the login comes from the token Spark ships (its HMAC is known once obtained).
    token = {"kafka.bootstrap.servers": KERBEROS}
    add("token", token, {}, token="real")
    add("token-refused", token, {}, token="bogus")

    for i, run in enumerate(runs):
        run.options = {
            **run.options,
            "kafka.share.group.id": f"g-audit-{run.name}-{secrets.token_hex(4)}",
            "startingOffsets": "earliest",
            "kafka.share.parallelism": "2",
            "kafka.default.api.timeout.ms": "30000",
        }
        run.options["subscribe"] = f"audit-{i}-{run.name}-{secrets.token_hex(4)}"
    return runs


def spark_confs(audit: Path, endpoint_url: str) -> list[str]:
    jvm = [
        f"-Dlog4j2.configurationFile={LOG4J2}",
        f"-Dkafka.share.audit.logs={audit / 'logs'}",
        f"-Djava.security.krb5.conf={KDC_DIR / 'krb5.conf'}",
        f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={endpoint_url}",
    ]
    (audit / "event-log").mkdir()
    driver = [*jvm, "-Dkafka.share.audit.jvm=driver"]
    executor = [*jvm, "-Dkafka.share.audit.jvm=executor-{{EXECUTOR_ID}}"]
    cluster = "spark.kafka.clusters.local"
    return [
        "spark.ui.enabled=false",
        "spark.eventLog.enabled=true",
        # Searched as it is written: Spark compresses it by default (zstd).
        "spark.eventLog.compress=false",
        f"spark.eventLog.dir={(audit / 'event-log').as_uri()}",
        f"spark.driver.extraJavaOptions={' '.join(driver)}",
        f"spark.executor.extraJavaOptions={' '.join(executor)}",
        f"{cluster}.auth.bootstrap.servers={KERBEROS}",
        f"{cluster}.target.bootstrap.servers.regex={re.escape(KERBEROS)}",
        f"{cluster}.security.protocol=SASL_PLAINTEXT",
        f"{cluster}.sasl.token.mechanism=SCRAM-SHA-512",
    ]


def search(files: list[Path], runs: dict[str, Run]) -> dict[str, list[tuple[str, Hit]]]:
    """Each run's hits: (the secret's name, where), in one pass over the files."""
    wanted = [
        (run.name, name, variant.encode())
        for run in runs.values()
        for name, value in run.secrets.items()
        for variant in {value, json.dumps(value)[1:-1]}
    ]
    hits: dict[str, list[tuple[str, Hit]]] = {name: [] for name in runs}
    for path in files:
        data = path.read_bytes()
        for run, name, secret in wanted:
            if secret not in data:
                continue
            for number, line in enumerate(data.split(b"\n"), 1):
                if secret in line:
                    masked = line.replace(secret, f"<{name} of {run}>".encode())
                    hits[run].append((name, Hit(path, number, masked.decode(errors="replace")[:400])))
    return hits


@pytest.fixture(scope="module")
def realm() -> Iterator[None]:
    """The module's KDC and broker."""
    kdc_env = {**os.environ, "KDC_LOCAL_DIR": str(KDC_DIR)}
    subprocess.run([str(KDC_LOCAL), "start"], check=True, timeout=300, env=kdc_env)
    try:
        subprocess.run([str(KAFKA_LOCAL), "start"], check=True, timeout=300, env=broker_env())
        try:
            yield
        finally:
            subprocess.run([str(KAFKA_LOCAL), "stop"], check=True, timeout=300, env=broker_env())
    finally:
        subprocess.run([str(KDC_LOCAL), "stop"], check=True, timeout=120, env=kdc_env)


@pytest.fixture(scope="module", params=["local-cluster", "standalone"])
def audit(realm: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Audit:
    """The job's runs on `local-cluster[2,1,1024]`, or on a standalone cluster of two workers
    (standalone_cluster.py) through spark-submit, whose directories (the workers' and master's logs,
    each executor's stdout and stderr) are searched too."""
    return audited(tmp_path_factory.mktemp(f"secrets-audit-{request.param}"), request.param)


def job_command(deployment: str, audit_dir: Path, job_args: list[str], confs: list[str]) -> list[str]:
    """The job on local-cluster, with its Spark conf given to the session it builds; or submitted to
    a standalone cluster started in `audit_dir`, with its Spark conf given to spark-submit (in client
    mode the driver JVM's options must be there before it starts)."""
    if deployment == "local-cluster":
        confs = [f"--conf={conf}" for conf in confs]
        return [sys.executable, str(JOB), *job_args, "--master", "local-cluster[2,1,1024]", *confs]
    submit = [option for conf in confs for option in ("--conf", conf)]
    (audit_dir / "standalone").mkdir()
    cluster = standalone_cluster(audit_dir / "standalone")
    cluster.start()
    STANDALONE.append(cluster)
    return spark_submit(cluster, JAR, JOB, *job_args, submit_options=submit)


def audited(base: Path, deployment: str) -> Audit:
    work, audit_dir = base / "work", base / "audit"
    work.mkdir()
    (audit_dir / "logs").mkdir(parents=True)
    admin = AdminClient({"bootstrap.servers": PLAINTEXT})
    kafka = KafkaCluster(PLAINTEXT, admin, cast(SparkSession, None))
    client_secret = random_secret("oauth")
    endpoint = TokenEndpoint(client_secret, TLS_DIR)
    try:
        runs = {r.name: r for r in the_runs(work, admin, endpoint.url, client_secret)}
        for run in runs.values():
            kafka.new_topic_named(run.options["subscribe"], partitions=2)
            kafka.produce(run.options["subscribe"], values(RECORDS))
        plan = work / "plan.json"
        planned = [{"name": r.name, "options": r.options, "token": r.token} for r in runs.values()]
        plan.write_text(json.dumps({"runs": planned}))
        job_args = [
            *("--plan", str(plan), "--audit", str(audit_dir), "--secrets-out", str(work / "hmacs.json")),
            *("--jar", JAR, "--kdc-dir", str(KDC_DIR), "--token-bootstrap", KERBEROS),
        ]
        started = time.monotonic()
        command = job_command(deployment, audit_dir, job_args, spark_confs(audit_dir, endpoint.url))
        python_path = os.pathsep.join(p for p in (str(REPO / "python"), os.environ.get("PYTHONPATH")) if p)
        with (audit_dir / "job-output.txt").open("wb") as output:
            subprocess.run(
                command,
                check=True,
                timeout=900,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**spark_env(), "PYTHONPATH": python_path},
            )
        seconds = time.monotonic() - started
    finally:
        endpoint.close()
        while STANDALONE:
            STANDALONE.pop().stop()
    hmacs = json.loads((work / "hmacs.json").read_text())
    for kind, run in (("real", runs["token"]), ("bogus", runs["token-refused"])):
        hmac = base64.b64decode(hmacs[kind])
        run.secrets |= {"token HMAC": hmacs[kind], "token HMAC (hex)": hmac.hex()}
    for i, token in enumerate(endpoint.tokens):
        runs["oauth"].secrets[f"access token {i}"] = token
    # The jars Spark copies to the workers are the connector's and pyspark's own.
    files = sorted(p for p in audit_dir.rglob("*") if p.is_file() and p.suffix != ".jar")
    return Audit(audit_dir, runs, search(files, runs), files, seconds)


RUNS = ["plain", "scram", "oauth", "mtls", "gssapi", "token"]
RUNS = [name for base in RUNS for name in (base, f"{base}-refused")] + ["mtls-pem"]


@pytest.mark.parametrize("run", RUNS)
def test_no_file_of_the_application_holds_a_secret_of_the_run(audit: Audit, run: str) -> None:
    assert audit.runs[run].secrets, "the run has secrets to look for"
    hits = audit.hits[run]
    report = "\n".join(f"{h.file.relative_to(audit.directory)}:{h.line_number}: {h.line}" for _, h in hits)
    assert not hits, f"{len(hits)} lines hold a secret of run {run}:\n{report}"


@pytest.mark.parametrize("run", RUNS)
def test_the_run_read_its_records_or_failed_to_log_in(audit: Audit, run: str) -> None:
    outcome = json.loads((audit.directory / "runs" / run / "outcome.json").read_text())
    if audit.runs[run].reads:
        assert outcome == {"error": None, "rows": RECORDS}, outcome
    else:
        assert outcome["error"], outcome
        assert outcome["rows"] == 0, outcome


def lines_of(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def test_the_search_read_every_jvms_debug_log_the_event_log_and_each_runs_plans(audit: Audit) -> None:
    # What makes the search above mean something: the files are there, and hold what they should.
    assert any(name.startswith("access token") for name in audit.runs["oauth"].secrets)
    logs = audit.directory / "logs"
    kafka_debug = re.compile(rf" DEBUG \[[^]]*\] {re.escape(SHADED)}\.")
    driver = lines_of(logs / "driver.log")
    assert any(kafka_debug.search(line) for line in driver), "the driver logs Kafka's clients at DEBUG"
    executors = sorted(logs.glob("executor-*.log"))
    assert [p.name for p in executors] == ["executor-0.log", "executor-1.log"]
    for log in executors:
        lines = lines_of(log)
        assert any(kafka_debug.search(line) for line in lines), f"{log.name} logs Kafka's clients at DEBUG"
        assert any("SaslClientAuthenticator" in line for line in lines), f"{log.name} logged a SASL login"
    stderr = sorted(audit.directory.rglob("stderr"))
    assert len(stderr) == 2, stderr
    assert all(kafka_debug.search(p.read_text()) for p in stderr), "each executor's stderr has Kafka's DEBUG"
    # Spark 4 writes the event log as a directory of rolled files, uncompressed here.
    event_files = [p for p in (audit.directory / "event-log").rglob("events_*") if p.is_file()]
    assert event_files, "the event log"
    events = "".join(p.read_text() for p in event_files)
    assert all(json.loads(line)["Event"] for line in events.splitlines()), "the event log is plain JSON"
    for event in ("QueryStartedEvent", "QueryProgressEvent", "QueryTerminatedEvent", "SQLExecutionStart"):
        assert f"{event}" in events, f"the event log has {event}"
    assert "kafka-share" in events
    for run in RUNS:
        directory = audit.directory / "runs" / run
        for name in ("plan-before-start.txt", "explain.txt", "recent-progress.json", "outcome.json"):
            assert (directory / name).stat().st_size > 0, f"{run}/{name}"
        if audit.runs[run].reads:
            assert "kafka-share" in (directory / "last-execution.txt").read_text()
            assert "KafkaShare" in (directory / "progress.json").read_text(), f"{run}'s progress"
            assert any((directory / "checkpoint" / "offsets").iterdir()), f"{run}'s checkpoint"
    print(f"the job took {audit.seconds:.0f} s; {len(audit.files)} files searched")
