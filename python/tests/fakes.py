"""Stand-ins for Spark sessions and JVM errors, for tests that run without a JVM."""

from __future__ import annotations

from typing import Any


class FakeJavaException:
    """What Py4JJavaError.java_exception needs to be for the code under test."""

    _target_id = "o1"

    def __init__(self, message: str | None) -> None:
        self.message = message

    def getMessage(self) -> str | None:
        return self.message


def py4j_error(java_message: str | None) -> Exception:
    # Imported here: the test without py4j uses the fakes of Spark Connect.
    from py4j.protocol import Py4JJavaError

    return Py4JJavaError(
        "An error occurred while calling o1.describeJson.\n", FakeJavaException(java_message)
    )


class FakeStreamReader:
    """Records what read_share_stream asks of spark.readStream."""

    def __init__(self) -> None:
        self.source: str | None = None
        self.given: dict[str, str] = {}

    def format(self, source: str) -> FakeStreamReader:
        self.source = source
        return self

    def options(self, **options: str) -> FakeStreamReader:
        self.given.update(options)
        return self

    def load(self) -> FakeDataFrame:
        return FakeDataFrame()


class FakeDataFrame:
    """Tells whether its schema was asked for: the analysis that makes Spark Connect check a plan."""

    analyzed = False

    @property
    def schema(self) -> str:
        self.analyzed = True
        return "struct<...>"


class FakeConnectSession:
    """Looks like pyspark.sql.connect.session.SparkSession to the package, without its dependencies."""

    def __init__(self) -> None:
        self.readStream = FakeStreamReader()

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a Spark Connect session has no {name}")


FakeConnectSession.__module__ = "pyspark.sql.connect.session"
