"""The driver is SIGKILLed after the sink wrote a batch but before Spark committed it; the query
restarts from the same checkpoint. Nothing may be lost: the killed batch's records were never
acknowledged, so the group delivers them again once their locks expire."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

from conftest import BOOTSTRAP, JAR, KafkaCluster, values

JOB = Path(__file__).parent / "jobs" / "sink_then_kill.py"


def run_job(topic: str, group: str, tmp_path: Path, *, kill: bool) -> int:
    command = [sys.executable, str(JOB), "--bootstrap", BOOTSTRAP, "--topic", topic, "--group", group]
    command += ["--checkpoint", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "out"), "--jar", JAR]
    return subprocess.run([*command, *(["--kill"] if kill else [])], timeout=300, check=False).returncode


def test_driver_killed_between_sink_write_and_commit_loses_nothing(
    kafka: KafkaCluster, group: str, tmp_path: Path
) -> None:
    topic = kafka.new_topic()
    expected = values(1_000)
    kafka.produce(topic, expected)
    (tmp_path / "out").mkdir()

    assert run_job(topic, group, tmp_path, kill=True) != 0
    killed = {value for value, _ in json.loads((tmp_path / "out" / "killed.json").read_text())}
    assert killed, "the first run was killed before its sink saw any record"

    assert run_job(topic, group, tmp_path, kill=False) == 0
    # The sink's output: the last write of each batch id (the restart re-ran the killed batch id).
    rows = [row for f in sorted((tmp_path / "out").glob("batch-*.json")) for row in json.loads(f.read_text())]
    counts = collections.Counter(value for value, _ in rows)
    lost = set(expected) - set(counts)
    assert not lost, f"lost {len(lost)} records"
    redelivered = {value for value, delivery_count in rows if delivery_count >= 2}
    assert killed <= redelivered, "records of the killed batch were acknowledged before Spark committed it"
    assert kafka.total_lag(group) == 0
