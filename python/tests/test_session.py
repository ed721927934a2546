from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pyspark.sql import SparkSession

import spark_kafka_share
from spark_kafka_share import (
    KafkaShareConfigurationError,
    KafkaShareConnectNotSupportedError,
    KafkaShareConnectorNotFoundError,
    KafkaShareOptions,
    configure_spark_with_kafka_share,
    jar_path,
    read_share_stream,
    share_group_state,
)
from spark_kafka_share._jvm import is_connect_session, require_connector

from .fakes import FakeConnectSession, FakeDataFrame, py4j_error

VALID: dict[str, Any] = {"bootstrap_servers": "localhost:9092", "group_id": "g", "subscribe": "orders"}


BUILDS = ("spark35_2.12", "spark35_2.13", "spark4_2.13")


@pytest.fixture
def bundled_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package's jars, one per build; returns the one for the installed pyspark (Spark 4)."""
    (tmp_path / "jars").mkdir()
    for build in BUILDS:
        (tmp_path / "jars" / f"spark-kafka-share-{build}.jar").write_bytes(b"PK")
    monkeypatch.setattr(spark_kafka_share._bundled_jars, "_JARS_DIR", tmp_path / "jars")
    return tmp_path / "jars" / "spark-kafka-share-spark4_2.13.jar"


def test_jar_path_is_the_bundled_jar_for_the_installed_pyspark(bundled_jar: Path) -> None:
    assert jar_path() == str(bundled_jar)


@pytest.mark.parametrize(
    ("spark", "scala", "build"),
    [
        ("4.0.1", None, "spark4_2.13"),
        ("4.3.0", None, "spark4_2.13"),
        ("3.5.2", "2.12", "spark35_2.12"),
        ("3.5.2", "2.13", "spark35_2.13"),
    ],
)
def test_jar_path_picks_the_build_for_a_spark_and_scala_version(
    bundled_jar: Path, spark: str, scala: str | None, build: str
) -> None:
    assert jar_path(spark, scala) == str(bundled_jar.parent / f"spark-kafka-share-{build}.jar")


def test_jar_path_names_the_versions_it_has_jars_for_when_it_has_none_for_this_spark(
    bundled_jar: Path,
) -> None:
    with pytest.raises(KafkaShareConnectorNotFoundError) as raised:
        jar_path("3.4.1", "2.12")
    assert raised.value.condition == "KAFKA_SHARE_SPARK_UNSUPPORTED"
    assert "Spark 3.4.1 with Scala 2.12" in str(raised.value)
    assert "Spark 3.5" in str(raised.value)


def test_jar_path_says_how_to_get_the_jar_when_it_is_not_bundled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spark_kafka_share._bundled_jars, "_JARS_DIR", tmp_path / "missing")
    with pytest.raises(KafkaShareConnectorNotFoundError) as raised:
        jar_path()
    assert raised.value.condition == "KAFKA_SHARE_JAR_NOT_FOUND"
    assert str(tmp_path / "missing") in str(raised.value)
    assert "python/build-wheel.sh" in str(raised.value)


def test_configure_adds_the_jar_to_spark_jars(bundled_jar: Path) -> None:
    builder = SparkSession.builder.master("local[1]")
    assert configure_spark_with_kafka_share(builder) is builder
    assert builder._options["spark.jars"] == str(bundled_jar)


def test_configure_keeps_the_jars_already_configured(bundled_jar: Path) -> None:
    builder = SparkSession.builder.config("spark.jars", "/opt/a.jar,/opt/b.jar")
    configure_spark_with_kafka_share(configure_spark_with_kafka_share(builder))
    assert builder._options["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{bundled_jar}"


def test_connect_sessions_are_told_from_classic_ones() -> None:
    assert is_connect_session(cast(SparkSession, FakeConnectSession()))
    assert not is_connect_session(SparkSession.__new__(SparkSession))


def test_require_connector_says_how_to_add_the_jar() -> None:
    def class_not_found(*args: Any) -> None:
        raise py4j_error("io.github.sparkkafkashare.KafkaShareSourceProvider")

    jvm = SimpleNamespace(
        java=SimpleNamespace(
            lang=SimpleNamespace(
                Class=SimpleNamespace(forName=class_not_found),
                Thread=SimpleNamespace(
                    currentThread=lambda: SimpleNamespace(getContextClassLoader=lambda: None)
                ),
            )
        )
    )
    spark = cast(SparkSession, SimpleNamespace(_jvm=jvm))
    with pytest.raises(KafkaShareConnectorNotFoundError) as raised:
        require_connector(spark)
    assert raised.value.condition == "KAFKA_SHARE_CONNECTOR_NOT_LOADED"
    assert "configure_spark_with_kafka_share" in str(raised.value)
    assert "--jars" in str(raised.value)


def test_read_share_stream_under_spark_connect_passes_options_and_analyzes() -> None:
    spark = FakeConnectSession()
    df = read_share_stream(cast(SparkSession, spark), KafkaShareOptions(**VALID), parallelism=3)
    assert cast(FakeDataFrame, df).analyzed  # so the server checks the options at once
    assert spark.readStream.source == "kafka-share"
    assert spark.readStream.given == KafkaShareOptions(**VALID, parallelism=3).to_options()


def test_read_share_stream_accepts_fields_as_keywords() -> None:
    spark = FakeConnectSession()
    read_share_stream(cast(SparkSession, spark), **VALID, include_headers=True)
    assert spark.readStream.given["includeHeaders"] == "true"


def test_read_share_stream_checks_kafka_options_keys_before_using_spark() -> None:
    with pytest.raises(KafkaShareConfigurationError, match="KAFKA_SHARE_PREFIXED_KAFKA_OPTION"):
        read_share_stream(cast(SparkSession, object()), **VALID, kafka_options={"kafka.acks": "all"})


def test_the_package_works_without_py4j_as_a_spark_connect_client_has_it() -> None:
    """pyspark-client, the Spark Connect-only install, has neither py4j nor pyspark.core."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["py4j"] = sys.modules["pyspark.core"] = None  # import fails, as where not installed
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pyspark.errors import IllegalArgumentException
        import spark_kafka_share as sks
        from tests.fakes import FakeConnectSession

        spark = FakeConnectSession()
        sks.read_share_stream(spark, **{VALID!r})
        assert spark.readStream.given["subscribe"] == "orders"
        error = IllegalArgumentException(message="[KAFKA_SHARE_NO_SUBSCRIPTION] One of the options ...")
        assert isinstance(sks.from_jvm_error(error), sks.KafkaShareConfigurationError)
        assert sks.from_jvm_error(ValueError("[KAFKA_SHARE_NO_SUBSCRIPTION] ...")) is None
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_share_group_state_needs_a_classic_session() -> None:
    with pytest.raises(NotImplementedError) as raised:
        share_group_state(cast(SparkSession, FakeConnectSession()), "localhost:9092", "g")
    assert isinstance(raised.value, KafkaShareConnectNotSupportedError)
    assert raised.value.condition == "KAFKA_SHARE_CLASSIC_SESSION_REQUIRED"


def test_explicit_acknowledgement_needs_a_classic_session() -> None:
    batch = cast(Any, SimpleNamespace(sparkSession=FakeConnectSession()))
    calls = {
        "acknowledge": lambda: spark_kafka_share.acknowledge(batch, batch),
        "release_or_dead_letter": lambda: spark_kafka_share.release_or_dead_letter(
            batch, batch, max_deliveries=3
        ),
    }
    for name, call in calls.items():
        with pytest.raises(
            KafkaShareConnectNotSupportedError, match=rf"{name}\(\) needs a classic Spark session"
        ):
            call()
