"""The connector jars bundled in this package, and which of them runs on a Spark and Scala version."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import pyspark

# build-wheel.sh copies the connector's assembly jars here (kafka-clients shaded inside), one per
# Spark line and Scala version: spark-kafka-share-<build>.jar.
_JARS_DIR = Path(__file__).parent / "jars"
# The build that runs on each Spark line, by Scala version: one for every Spark 4 line, one for
# Spark 3.5 per Scala version. The connector itself refuses, at load(), a line it was not built for.
_BUILDS = {("3.5", "2.12"): "spark35_2.12", ("3.5", "2.13"): "spark35_2.13", ("4", "2.13"): "spark4_2.13"}


class BundledJar(NamedTuple):
    """The jar for a Spark and Scala version, with the versions it was looked up for."""

    spark_version: str
    scala_version: str
    # None when no build runs on that Spark with that Scala; a path with no file behind it when the
    # package was built without that build's jar (or not built at all: a source checkout).
    path: Path | None


def bundled_jar(spark_version: str | None = None, scala_version: str | None = None) -> BundledJar:
    """The jar of the build for a Spark and Scala version; by default, those of the installed PySpark."""
    spark = spark_version or pyspark.__version__
    scala = scala_version or _installed_scala_version(spark)
    line = "4" if spark.startswith("4.") else ".".join(spark.split(".")[:2])
    build = _BUILDS.get((line, scala))
    path = None if build is None else _JARS_DIR / f"spark-kafka-share-{build}.jar"
    return BundledJar(spark, scala, path)


def _installed_scala_version(spark_version: str) -> str:
    """2.13 on Spark 4; on Spark 3.5, the Scala of the scala-library jar PySpark (or SPARK_HOME) runs with."""
    if not spark_version.startswith("3."):
        return "2.13"
    # PySpark runs with SPARK_HOME's jars when it is set, else with its own.
    homes = [Path(h) for h in [os.environ.get("SPARK_HOME")] if h] + [Path(pyspark.__file__).parent]
    for home in homes:
        for library in (home / "jars").glob("scala-library-2.*.jar"):
            return ".".join(library.name.removeprefix("scala-library-").split(".")[:2])
    return "2.12"
