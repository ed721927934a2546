"""An S3 endpoint for `make bench`: moto's S3 emulator in a process of its own, and the requests it
served, read from its access log.

The emulator answers on localhost, so its latency is not a real store's; what carries over to one is
how many requests of each kind a batch makes (each a round trip to S3, ABFS or GCS, and billed).
"""

from __future__ import annotations

import collections
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3

# werkzeug's access log line: 127.0.0.1 - - [date] "PUT /bucket/key HTTP/1.1" 200 -
_REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
RECORDS_LOG_DIR = "/kafka-share-rounds"


class S3Emulator:
    """moto's server on a free local port, with one bucket; stop() ends it."""

    bucket = "bench"

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = Path(tempfile.mkdtemp(prefix="bench-s3-")) / "access.log"
        server = Path(sys.executable).parent / "moto_server"
        with self._log.open("w") as log:
            self._process = subprocess.Popen(
                [str(server), "-H", "127.0.0.1", "-p", str(self.port)], stdout=log, stderr=log
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                boto3.client(
                    "s3",
                    endpoint_url=self.endpoint,
                    aws_access_key_id="bench",
                    aws_secret_access_key="bench",
                    region_name="us-east-1",
                ).create_bucket(Bucket=self.bucket)
                break
            except Exception:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"moto's S3 server did not start; see {self._log}") from None
                time.sleep(0.5)

    def spark_conf(self) -> dict[str, str]:
        """S3A settings that point `s3a://bench/...` at the emulator."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.access.key": "bench",
            "spark.hadoop.fs.s3a.secret.key": "bench",
        }

    def requests_under(self, prefix: str) -> dict[str, dict[str, int]]:
        """Requests for keys under `prefix` so far, by verb (LIST for a listing; a copy is a PUT):
        those for the records log and those for the rest of the checkpoint (Spark's own files)."""
        counts: dict[str, collections.Counter[str]] = {
            "records log": collections.Counter(),
            "Spark's checkpoint files": collections.Counter(),
        }
        for line in self._log.read_text(errors="replace").splitlines():
            match = _REQUEST.search(_COLOUR.sub("", line))
            if not match or prefix not in match.group(2):
                continue
            verb, path = match.groups()
            verb = "LIST" if verb == "GET" and "list-type=" in path else verb
            counts["records log" if RECORDS_LOG_DIR in path else "Spark's checkpoint files"][verb] += 1
        return {origin: dict(sorted(c.items())) for origin, c in counts.items()}

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)
