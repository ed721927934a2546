"""The Spark application of test_secrets_audit.py: one kafka-share query a run of `--plan`, one after
another, each to Spark's `noop` sink with Trigger.AvailableNow, in an application whose executors run
in JVMs of their own. The test gives the application its log configuration, event log and JVM
options through `--conf`, and searches all that `--audit` holds afterwards for the runs' secrets.

Each run `<name>` leaves in `<audit>/runs/<name>/`: the streaming DataFrame's query execution before
the start (`plan-before-start.txt`), the query's `explain(extended=True)` (`explain.txt`), its last
batch's query execution (`last-execution.txt`, if a batch ran), its last and recent progress
(`progress.json`), its checkpoint, and `outcome.json`: the rows read and the query's error, if any.

A run with `"token": "real"` reads with a Kafka delegation token that the driver obtains over GSSAPI
(jobs/kafka_tokens.py) and Spark ships to the executors; `"token": "bogus"` ships one of the same id
with a random HMAC, which the broker refuses. Both HMACs (base64) go to `--secrets-out`, outside the
audited directory. Once the application stopped, the executors' stdout and stderr files are moved
from local-cluster's worker directories (`SPARK_HOME/work/<application id>`) to
`<audit>/executor-work/`.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from kafka_tokens import obtain_token, ship_token
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

parser = argparse.ArgumentParser()
parser.add_argument("--plan", required=True, help="a JSON file: {'runs': [{name, options, token?}]}")
parser.add_argument("--audit", required=True, help="the directory the test searches")
parser.add_argument("--secrets-out", required=True, help="where the tokens' HMACs go (not audited)")
parser.add_argument("--jar", required=True)
parser.add_argument("--master", help="none under spark-submit, which names it")
parser.add_argument("--conf", action="append", default=[], help="key=value, a Spark conf")
parser.add_argument("--executors", type=int, default=2)
parser.add_argument("--kdc-dir", help="the KDC of the token runs' GSSAPI login")
parser.add_argument("--token-bootstrap", help="the listener the driver asks for a token")
parser.add_argument("--timeout-s", type=float, default=150)


def session(args: argparse.Namespace) -> SparkSession:
    builder = SparkSession.builder.appName("kafka-share-secrets-audit").config("spark.jars", args.jar)
    if args.master:
        builder = builder.master(args.master)
    for pair in args.conf:
        builder = builder.config(*pair.split("=", 1))
    spark = builder.getOrCreate()
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    deadline = time.monotonic() + 120
    while jsc.sc().getExecutorMemoryStatus().size() < args.executors + 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    return spark


def run(spark: SparkSession, name: str, options: dict[str, str], audit: Path, timeout_s: float) -> None:
    out = audit / "runs" / name
    out.mkdir(parents=True, exist_ok=True)
    reader = spark.readStream.format("kafka-share")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    (out / "plan-before-start.txt").write_text(df._jdf.queryExecution().toString())
    query = (
        df.writeStream.format("noop")
        .queryName(f"audit_{name.replace('-', '_')}")
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    error = None
    try:
        if not query.awaitTermination(timeout_s):
            error = f"still running after {timeout_s} s"
    except StreamingQueryException as failure:
        error = str(failure)
    query.stop()
    jsq = query._jsq
    keep(out / "explain.txt", lambda: str(jsq.explainInternal(True)))
    keep(out / "last-execution.txt", lambda: str(jsq.streamingQuery().lastExecution().toString()))
    keep(out / "progress.json", lambda: str(jsq.lastProgress().prettyJson()))
    keep(out / "recent-progress.json", lambda: "[" + ",".join(p.json() for p in jsq.recentProgress()) + "]")
    recent = query.recentProgress
    rows = sum(int(p["numInputRows"]) for p in recent)
    (out / "outcome.json").write_text(json.dumps({"error": error, "rows": rows}))


def keep(path: Path, text: Callable[[], str]) -> None:
    """Writes `text()` to `path`, or why it could not be had to `<path>.error` (a batch that never ran
    has no last execution): the test checks that the files are there."""
    try:
        path.write_text(text())
    except Exception as failure:
        path.with_name(path.name + ".error").write_text(repr(failure))


def copy_executor_files(work: Path, audit: Path) -> None:
    """Every file but jars of the application's directory `work` in local-cluster's workers (their
    work/ in SPARK_HOME, where each executor's stdout and stderr are), to `<audit>/executor-work/`;
    then removes `work`."""
    for path in work.rglob("*"):
        if path.is_file() and path.suffix != ".jar":
            target = audit / "executor-work" / path.relative_to(work)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    shutil.rmtree(work)


def main() -> None:
    args = parser.parse_args()
    audit = Path(args.audit)
    plan = json.loads(Path(args.plan).read_text())
    spark = session(args)
    (audit / "application-id.txt").write_text(spark.sparkContext.applicationId)
    hmacs: dict[str, str] = {}
    token_id = ""
    for entry in plan["runs"]:
        token = entry.get("token")
        if token == "real":
            token_id, hmac = obtain_token(spark, args.token_bootstrap, Path(args.kdc_dir))
            ship_token(spark, token_id, hmac)
            hmacs["real"] = base64.b64encode(hmac).decode()
        elif token == "bogus":
            hmac = secrets.token_bytes(64)
            ship_token(spark, token_id or "bogus-token", hmac)
            hmacs["bogus"] = base64.b64encode(hmac).decode()
        Path(args.secrets_out).write_text(json.dumps(hmacs))
        run(spark, entry["name"], entry["options"], audit, args.timeout_s)
    jvm = spark.sparkContext._jvm
    work = Path(str(jvm.java.lang.System.getenv("SPARK_HOME"))) / "work" / spark.sparkContext.applicationId
    spark.stop()
    if args.master and args.master.startswith("local-cluster"):
        copy_executor_files(work, audit)


if __name__ == "__main__":
    main()
