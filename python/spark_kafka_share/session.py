"""Putting the bundled connector jar on a Spark session's classpath."""

from __future__ import annotations

from pyspark.sql import SparkSession

from . import _bundled_jars
from .errors import KafkaShareConnectorNotFoundError


def jar_path(spark_version: str | None = None, scala_version: str | None = None) -> str:
    """The path of the connector jar bundled in this package for a Spark and Scala version.

    By default, those of the installed PySpark: its version, and the Scala version of its jars
    (2.13 on Spark 4; on Spark 3.5, 2.12 unless its jars, or ``SPARK_HOME``'s, are for 2.13).
    For ``spark-submit`` or the ``pyspark`` shell::

        jar=$(python -c 'import spark_kafka_share; print(spark_kafka_share.jar_path())')
        spark-submit --jars "$jar" app.py

    Raises:
        KafkaShareConnectorNotFoundError: the package has no jar for that Spark and Scala (a Spark line
            it was not built for, or a source checkout that was not built).
    """
    spark, scala, jar = _bundled_jars.bundled_jar(spark_version, scala_version)
    if jar is None:
        raise KafkaShareConnectorNotFoundError(
            "KAFKA_SHARE_SPARK_UNSUPPORTED",
            f"This package has no kafka-share jar for Spark {spark} with Scala {scala}. It bundles jars for "
            "Spark 3.5 (Scala 2.12 and 2.13) and Spark 4.0 to 4.3 (Scala 2.13).",
        )
    if not jar.is_file():
        raise KafkaShareConnectorNotFoundError(
            "KAFKA_SHARE_JAR_NOT_FOUND",
            f"The connector jar is not bundled at '{jar}': this looks like a source checkout "
            "without a build. Install the spark-kafka-share wheel, or build the jars (make jar) and run "
            "python/build-wheel.sh <out-dir> <assembly-jar>..., which copies them there.",
        )
    return str(jar)


def configure_spark_with_kafka_share(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Add the bundled connector jar to the builder's ``spark.jars``, keeping any jars already there.

    Like delta-spark's ``configure_spark_with_delta_pip``, but nothing is downloaded: the jar ships
    in this package. Use it before the session is created; ``spark.jars`` has no effect on a JVM that
    is already running (a SparkContext created earlier in the same process)::

        from pyspark.sql import SparkSession
        from spark_kafka_share import configure_spark_with_kafka_share

        builder = SparkSession.builder.appName("orders").master("local[*]")
        spark = configure_spark_with_kafka_share(builder).getOrCreate()

    For ``spark-submit``, pass ``--jars`` with :func:`jar_path` instead. With Spark Connect, the jar
    belongs on the Connect server, not in the client's builder.
    """
    jar = jar_path()
    jars = [path for path in builder._options.get("spark.jars", "").split(",") if path]
    if jar not in jars:
        jars.append(jar)
    return builder.config("spark.jars", ",".join(jars))
