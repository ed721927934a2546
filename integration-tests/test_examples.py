"""The examples users copy (examples/), run as a user runs them against the local broker, and the
user guide's code blocks taken from them, which must match the example files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import BOOTSTRAP, JAR, REPO, KafkaCluster

EXAMPLES = REPO / "examples"
GUIDE = REPO / "docs" / "user-guide.md"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
# The driver's JIT stops at C1: these applications live seconds, and start about 4 s sooner so.
SUBMIT_CONF = [
    "--driver-java-options",
    "-XX:TieredStopAtLevel=1",
    "--master",
    "local[2]",
    "--conf",
    "spark.ui.enabled=false",
    "--conf",
    "spark.sql.shuffle.partitions=2",
]


def _topic_with(values: list[str], partitions: int = 2) -> str:
    topic = f"ex-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value.encode())
    assert producer.flush(60) == 0
    return topic


def _count(topic: str, expected: int, timeout_s: float = 20) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"r-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen = 0
    try:
        for _ in range(int(timeout_s / 0.5)):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen += 1
            elif seen >= expected:
                break
    finally:
        consumer.close()
    return seen


def _submit(args: list[str], packages: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    command = [str(SPARK_SUBMIT), *SUBMIT_CONF, "--jars", JAR, *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _printed(stdout: str, what: str) -> int:
    found = re.findall(rf"^{what}: (\d+)$", stdout, re.MULTILINE)
    assert found, f"no '{what}:' in the output:\n{stdout}"
    return int(found[-1])


@pytest.fixture
def group() -> str:
    return f"ex-{uuid.uuid4().hex[:10]}"


def test_python_read_to_sink(kafka: KafkaCluster, tmp_path: Path, group: str) -> None:
    topic = _topic_with([f"r{i}" for i in range(200)])
    out = _submit([str(EXAMPLES / "python" / "read_to_sink.py"), BOOTSTRAP, topic, group, str(tmp_path)])
    assert _printed(out, "records read") == 200
    assert kafka.unfinished(group, topic) == 0


def test_python_dead_letter(kafka: KafkaCluster, tmp_path: Path, group: str) -> None:
    topic = _topic_with([f"bad{i}" if i % 10 == 0 else f"r{i}" for i in range(100)])
    dlq = _topic_with([], partitions=1)
    out = _submit([str(EXAMPLES / "python" / "dead_letter.py"), BOOTSTRAP, topic, group, dlq, str(tmp_path)])
    assert _printed(out, "records read") == 90
    assert sum(int(n) for n in re.findall(r"dead-lettered (\d+)", out)) == 10
    assert _count(dlq, 10) == 10
    assert kafka.unfinished(group, topic) == 0


def test_python_exactly_once(kafka: KafkaCluster, tmp_path: Path, group: str) -> None:
    topic = _topic_with([f"r{i}" for i in range(200)])
    out = _submit([str(EXAMPLES / "python" / "exactly_once.py"), BOOTSTRAP, topic, group, str(tmp_path)])
    assert _printed(out, "records read") == 200
    assert _printed(out, "distinct records") == 200
    assert kafka.unfinished(group, topic) == 0


EXAMPLES_JAR = EXAMPLES / "target" / "examples.jar"


def _submit_jvm(main_class: str, *args: str) -> str:
    assert EXAMPLES_JAR.is_file(), f"{EXAMPLES_JAR} is missing: run `make jar` (sbt examples/package)"
    return _submit(["--class", main_class, str(EXAMPLES_JAR), BOOTSTRAP, *args])


@pytest.mark.parametrize("main_class", ["ReadToSink", "ReadToSinkJava"])
def test_jvm_read_to_sink(kafka: KafkaCluster, tmp_path: Path, group: str, main_class: str) -> None:
    topic = _topic_with([f"r{i}" for i in range(200)])
    out = _submit_jvm(main_class, topic, group, str(tmp_path))
    assert _printed(out, "records read") == 200
    assert kafka.unfinished(group, topic) == 0


@pytest.mark.parametrize("main_class", ["DeadLetter", "DeadLetterJava"])
def test_jvm_dead_letter(kafka: KafkaCluster, tmp_path: Path, group: str, main_class: str) -> None:
    topic = _topic_with([f"bad{i}" if i % 10 == 0 else f"r{i}" for i in range(100)])
    dlq = _topic_with([], partitions=1)
    out = _submit_jvm(main_class, topic, group, dlq, str(tmp_path))
    assert _printed(out, "records read") == 90
    assert sum(int(n) for n in re.findall(r"dead-lettered (\d+)", out)) == 10
    assert _count(dlq, 10) == 10
    assert kafka.unfinished(group, topic) == 0


@pytest.mark.parametrize("main_class", ["ExactlyOnce", "ExactlyOnceJava"])
def test_jvm_exactly_once(kafka: KafkaCluster, tmp_path: Path, group: str, main_class: str) -> None:
    topic = _topic_with([f"r{i}" for i in range(200)])
    out = _submit_jvm(main_class, topic, group, str(tmp_path))
    assert _printed(out, "records read") == 200
    assert _printed(out, "distinct records") == 200
    assert kafka.unfinished(group, topic) == 0


# The guide's blocks taken from an example: `<!-- example: examples/x.py#name -->` before a fenced block
# whose text is the example's lines between `# example: name` and `# end example` (comment markers of
# any language), dedented.
_GUIDE_MARK = re.compile(r"<!-- example: (\S+)#(\S+) -->\n+```\w*\n(.*?)```", re.DOTALL)


def _snippet(path: Path, name: str) -> str:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(rf"(#|//) example: {re.escape(name)}$", line))
    end = next(i for i in range(start + 1, len(lines)) if re.search(r"(#|//) end example$", lines[i]))
    body = lines[start + 1 : end]
    indent = min(len(line) - len(line.lstrip()) for line in body if line.strip())
    return "\n".join(line[indent:] for line in body) + "\n"


def test_guide_blocks_match_examples() -> None:
    blocks = _GUIDE_MARK.findall(GUIDE.read_text())
    assert len(blocks) >= 3, "the guide marks no blocks taken from examples/"
    for path, name, block in blocks:
        assert block == _snippet(REPO / path, name), (
            f"the guide's block of {path}#{name} differs from the file"
        )


def test_examples_are_short() -> None:
    files = [p for p in EXAMPLES.rglob("*") if p.suffix in (".py", ".scala", ".java")]
    assert files
    for path in files:
        assert len(path.read_text().splitlines()) < 80, f"{path} has 80 lines or more"
