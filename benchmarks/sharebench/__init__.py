"""The code of `make bench`, which benchmarks/bench.py runs, in modules by role. Each imports only
those below it in this list:

- run: one run: the options, the Spark session, the sections in order, the result file and table;
- scenarios: the sections, what each measures and in which order;
- report: the figures printed as each section ends, the result JSON file, the closing table;
- spark_queries: Spark's queries on kafka-share, on its `kafka` source and on `rate-micro-batch`;
- kafka_tools, jvm, object_store: Kafka's command-line tools (topics, groups, its perf tools), the
  driver JVM's heap and CPU use, moto's S3 emulator;
- options, variants, timings: the command line, the settings the scenarios vary, the figures a
  query's progress gives.
"""

from pathlib import Path

# The repository's root.
REPO = Path(__file__).resolve().parent.parent.parent
