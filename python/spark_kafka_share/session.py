"""Putting the bundled connector jar on a Spark session's classpath."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from .errors import KafkaShareConnectorNotFoundError

# build-wheel.sh copies the connector's assembly jar (kafka-clients shaded inside) here.
_BUNDLED_JAR = Path(__file__).parent / "jars" / "spark-kafka-share-assembly.jar"


def jar_path() -> str:
    """The path of the connector jar bundled in this package.

    For ``spark-submit`` or the ``pyspark`` shell::

        jar=$(python -c 'import spark_kafka_share; print(spark_kafka_share.jar_path())')
        spark-submit --jars "$jar" app.py

    Raises:
        KafkaShareConnectorNotFoundError: the package has no jar (a source checkout that was not built).
    """
    if not _BUNDLED_JAR.is_file():
        raise KafkaShareConnectorNotFoundError(
            "KAFKA_SHARE_JAR_NOT_FOUND",
            f"The connector jar is not bundled at '{_BUNDLED_JAR}': this looks like a source checkout "
            "without a build. Install the spark-kafka-share wheel, or build the jar (make jar) and run "
            "python/build-wheel.sh <assembly-jar> <out-dir>, which copies it there.",
        )
    return str(_BUNDLED_JAR)


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
