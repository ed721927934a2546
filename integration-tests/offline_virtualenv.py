"""A fresh virtualenv that installs from local files only (`pip --no-index` from the wheelhouse `make
test` builds), as a cluster or a locked-down laptop would, and runs an application in it with none of
the test process's Python or Spark settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# What the test process sets for itself (conftest, the Connect client tests) and must not leak into
# the application: it would run this checkout's package, or another interpreter, or a Connect client.
LEFT_OUT = (
    "PYTHONPATH",
    "PYSPARK_PYTHON",
    "SPARK_HOME",
    "VIRTUAL_ENV",
    "SPARK_REMOTE",
    "SPARK_CONNECT_MODE_ENABLED",
)


def built_wheel() -> str:
    """The spark-kafka-share wheel `make test` built."""
    wheel = os.environ.get("SPARK_KAFKA_SHARE_WHEEL")
    if not (wheel and os.environ.get("SPARK_KAFKA_SHARE_WHEELHOUSE") and Path(wheel).is_file()):
        pytest.fail(
            "SPARK_KAFKA_SHARE_WHEEL and SPARK_KAFKA_SHARE_WHEELHOUSE are unset: run it through `make test`."
        )
    return wheel


class OfflineVirtualenv:
    def __init__(self, where: Path) -> None:
        self.where = where
        self.venv = where / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)

    def install(self, *requirements: str) -> None:
        wheelhouse = os.environ["SPARK_KAFKA_SHARE_WHEELHOUSE"]
        pip = [str(self.venv / "bin/pip"), "install", "--quiet", "--no-index", "--find-links", wheelhouse]
        subprocess.run([*pip, *requirements], check=True, timeout=600)

    def distributions(self, prefix: str) -> list[str]:
        """The installed distributions whose name starts with `prefix`, with their versions."""
        return sorted(p.name for p in self.venv.glob(f"lib/python*/site-packages/{prefix}*.dist-info"))

    def run(self, app: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Runs `app` (Python source) with `args`; fails the test, with its stderr, if it fails."""
        (self.where / "app.py").write_text(app)
        env = {k: v for k, v in os.environ.items() if k not in LEFT_OUT}
        run = subprocess.run(
            [str(self.venv / "bin/python"), "app.py", *args],
            cwd=self.where,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return run
