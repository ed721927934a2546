"""A Spark standalone cluster on loopback: a master and workers started with `spark-class` from the
pyspark the tests run with (pyspark ships no start-master.sh), so that every Spark line of `make
test-compat` gets one of its own release. Drivers reach it with `spark-submit --master`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from conftest import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def spark_env() -> dict[str, str]:
    """The environment of the cluster's processes and its drivers: pyspark's own distribution, and this
    interpreter for Python workers. Small daemons: a master and two workers beside the tests on 2 cores."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_DAEMON_MEMORY": "256m",
        # Spark 3.5's launch scripts look for the Scala version of a build; pyspark's jars are one.
        "SPARK_SCALA_VERSION": os.environ.get("SPARK_SCALA_VERSION", "2.13"),
    }


def _answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Worker:
    port: int
    work_dir: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def executors(self) -> list[int]:
        """The pids of the executors this worker launched (they name the worker's URL)."""
        found = subprocess.run(
            ["pgrep", "-f", f"CoarseGrainedExecutorBackend.*Worker@127.0.0.1:{self.port}"],
            capture_output=True,
            text=True,
        )
        return [int(p) for p in found.stdout.split()]


@dataclass
class StandaloneCluster:
    master_port: int
    workers: list[Worker]
    directory: Path
    master: subprocess.Popen[bytes] | None = None
    cores_per_worker: int = 1
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spark_class(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                env=spark_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(process)
        return process

    def start(self) -> None:
        self.master = self._spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.master_port),
            "--webui-port",
            str(free_port()),
            log=self.directory / "master.log",
        )
        self._wait_for(self.master_port, "master", self.directory / "master.log")
        for index in range(len(self.workers)):
            self.start_worker(index)

    def start_worker(self, index: int) -> None:
        worker = self.workers[index]
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        worker.process = self._spark_class(
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            "--host",
            "127.0.0.1",
            "--port",
            str(worker.port),
            "--webui-port",
            str(free_port()),
            "--cores",
            str(self.cores_per_worker),
            "--memory",
            "1g",
            "--work-dir",
            str(worker.work_dir),
            log=worker.log,
        )
        self._wait_for(worker.port, f"worker {index}", worker.log)

    def worker_of(self, executor: int) -> int:
        """The index of the worker that launched the executor JVM with pid `executor`."""
        found = [i for i, worker in enumerate(self.workers) if executor in worker.executors()]
        assert found, f"no worker of this cluster launched executor {executor}"
        return found[0]

    def kill_worker(self, index: int) -> None:
        """SIGKILLs worker `index` and the executors it launched, as a machine that dies takes both."""
        worker = self.workers[index]
        assert worker.process is not None
        executors = worker.executors()
        worker.process.send_signal(signal.SIGKILL)
        for pid in executors:
            os.kill(pid, signal.SIGKILL)
        worker.process.wait(30)

    def stop(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for worker in self.workers:
            for pid in worker.executors():
                os.kill(pid, signal.SIGKILL)
        for process in self.started:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)

    @staticmethod
    def _wait_for(port: int, what: str, log: Path) -> None:
        deadline = time.monotonic() + 60
        while not _answers(port):
            assert time.monotonic() < deadline, (
                f"the standalone {what} did not start: {log.read_text()[-2000:]}"
            )
            time.sleep(0.5)


def standalone_cluster(directory: Path, workers: int = 2) -> StandaloneCluster:
    """A master and `workers` workers of one core each, not yet started."""
    return StandaloneCluster(
        master_port=free_port(),
        workers=[
            Worker(free_port(), directory / f"worker-{i}", directory / f"worker-{i}.log")
            for i in range(workers)
        ],
        directory=directory,
    )


def spark_submit(
    cluster: StandaloneCluster, jar: str, job: Path | str, *args: str, submit_options: Sequence[str] = ()
) -> list[str]:
    """The spark-submit command that runs `job` against `cluster`, with the connector on --jars and
    `submit_options` before the job."""
    return [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master",
        cluster.url,
        "--jars",
        jar,
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.executor.cores=1",
        "--conf",
        "spark.ui.enabled=false",
        *submit_options,
        str(job),
        *args,
    ]
