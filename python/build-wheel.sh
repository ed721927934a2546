#!/usr/bin/env bash
# Builds the spark-kafka-share wheel with the connector's assembly jars inside it, one per build.
#
#   python/build-wheel.sh <out-dir> <assembly-jar>...
#
# Each jar goes in as spark-kafka-share-<build>.jar, <build> read off its name: spark4_2.13 for the
# connector's own assembly, spark35_<scala> for connector/spark-3.5's. Builds offline (--no-isolation):
# the Python running it (PYTHON, default python3) needs the build tools of requirements-dev.txt.
# Prints the path of the wheel.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 <out-dir> <assembly-jar>..." >&2
  exit 2
fi
out=$1
shift
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)

rm -rf "$here/spark_kafka_share/jars"/*.jar
mkdir -p "$here/spark_kafka_share/jars"
builds=()
for jar in "$@"; do
  if [[ ! -f $jar ]]; then
    echo "$0: no jar at $jar (build it with 'make jar')" >&2
    exit 1
  fi
  case $(basename "$jar") in
    spark-kafka-share-spark35_2.1[23]-assembly-*) build=$(basename "$jar" | sed 's/^spark-kafka-share-\(spark35_2.1[23]\)-.*/\1/') ;;
    spark-kafka-share-assembly-*) build=spark4_2.13 ;;
    *) echo "$0: cannot tell which build $jar is" >&2; exit 1 ;;
  esac
  cp "$jar" "$here/spark_kafka_share/jars/spark-kafka-share-$build.jar"
  builds+=("$build")
done

# A fresh directory, so that the wheel found below is this build's; no stale build/ either.
staging=$(mktemp -d)
trap 'rm -rf "$staging" "$here/build" "$here"/*.egg-info' EXIT
rm -rf "$here/build"
"$python" -m build --wheel --no-isolation --outdir "$staging" "$here" >&2

wheel=$(find "$staging" -name 'spark_kafka_share-*.whl')
"$python" - "$wheel" "${builds[@]}" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
missing = [b for b in sys.argv[2:] if f"spark_kafka_share/jars/spark-kafka-share-{b}.jar" not in names]
if missing:
    sys.exit(f"{sys.argv[1]} lacks the connector jars {missing}")
PY
mkdir -p "$out"
mv "$wheel" "$out/"
echo "$out/$(basename "$wheel")"
