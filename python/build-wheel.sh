#!/usr/bin/env bash
# Builds the spark-kafka-share wheel with the connector's assembly jar inside it.
#
#   python/build-wheel.sh <assembly-jar> <out-dir>
#
# Builds offline (--no-isolation): the Python running it (PYTHON, default python3) needs the
# build tools of requirements-dev.txt. Prints the path of the wheel.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <assembly-jar> <out-dir>" >&2
  exit 2
fi
jar=$1
out=$2
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)

if [[ ! -f $jar ]]; then
  echo "$0: no jar at $jar (build it with 'make jar')" >&2
  exit 1
fi

mkdir -p "$here/spark_kafka_share/jars"
cp "$jar" "$here/spark_kafka_share/jars/spark-kafka-share-assembly.jar"

# A fresh directory, so that the wheel found below is this build's; no stale build/ either.
staging=$(mktemp -d)
trap 'rm -rf "$staging" "$here/build" "$here"/*.egg-info' EXIT
rm -rf "$here/build"
"$python" -m build --wheel --no-isolation --outdir "$staging" "$here" >&2

wheel=$(find "$staging" -name 'spark_kafka_share-*.whl')
"$python" - "$wheel" <<'PY'
import sys, zipfile
if "spark_kafka_share/jars/spark-kafka-share-assembly.jar" not in zipfile.ZipFile(sys.argv[1]).namelist():
    sys.exit(f"{sys.argv[1]} lacks the connector jar")
PY
mkdir -p "$out"
mv "$wheel" "$out/"
echo "$out/$(basename "$wheel")"
