"""The local broker's script (dev/kafka-local) says which Kafka release the tests run against, and
refuses to start one release on data another last ran on (`KAFKA_BROKER_VERSION`, README)."""

import os
import re
import subprocess
from pathlib import Path

from conftest import KAFKA_LOCAL, REPO, free_port


def configured_release() -> str:
    """The Kafka release `make test` starts: KAFKA_BROKER_VERSION, or the build's kafka-clients version."""
    match = re.search(r'val kafkaVersion = "([^"]+)"', (REPO / "build.sbt").read_text())
    assert match, "build.sbt names no kafkaVersion"
    return os.environ.get("KAFKA_BROKER_VERSION") or match.group(1)


def kafka_local(command: str, data: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the script; with `data`, on that data dir and free ports, away from the tests' broker."""
    env = dict(os.environ)
    if data is not None:
        env.update(
            KAFKA_DATA_DIR=str(data),
            KAFKA_PORT=str(free_port()),
            KAFKA_CONTROLLER_PORT=str(free_port()),
            KAFKA_SASL_PORT=str(free_port()),
            KAFKA_SSL_PORT=str(free_port()),
            KAFKA_MTLS_PORT=str(free_port()),
        )
    return subprocess.run([str(KAFKA_LOCAL), command], capture_output=True, text=True, timeout=300, env=env)


def test_version_is_the_release_the_running_broker_reports() -> None:
    result = kafka_local("version")
    assert result.returncode == 0, result.stderr
    # What the broker itself logged as it started (Kafka's AppInfoParser), beside its data dir.
    data = Path(os.environ.get("KAFKA_DATA_DIR", REPO / "target" / "kafka-local" / "data"))
    logged = re.findall(r"Kafka version: (\S+)", (data.resolve().parent / "broker.log").read_text())
    assert logged, "the broker logged no version"
    assert result.stdout.strip() == logged[-1] == configured_release()


def test_data_another_release_last_ran_on_is_not_started(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\n")  # formatted storage, as far as the script looks
    (tmp_path / "broker.version").write_text("4.0.0\n")
    result = kafka_local("start", data)
    if result.returncode == 0:
        kafka_local("stop", data)
    assert result.returncode == 1, result.stdout
    assert f"Kafka 4.0.0 last ran on {data}, and this is Kafka {configured_release()}" in result.stderr
    assert "make kafka-down" in result.stderr
    assert not (tmp_path / "broker.pid").exists(), "a broker was started"
    assert kafka_local("version", data).stdout.strip() == "4.0.0"


def test_version_fails_where_no_broker_has_started(tmp_path: Path) -> None:
    result = kafka_local("version", tmp_path / "data")
    assert result.returncode == 1
    assert f"no broker has started on {tmp_path / 'data'}" in result.stderr
