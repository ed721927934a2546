# spark-kafka-share: the two commands a newcomer needs are `make demo` and `make test`.
# Everything they need (virtualenv, sbt, Kafka broker jars) is fetched from PyPI and Maven Central.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VENV_PY := $(VENV)/bin/python
VERSION := $(shell sed -n 's/^ThisBuild \/ version := "\(.*\)"/\1/p' build.sbt)
JAR := connector/target/scala-2.13/spark-kafka-share-assembly-$(VERSION).jar
# The builds for Spark 3.5, one per Scala version (connectorSpark35 in build.sbt); the wheel carries all three.
JARS_SPARK35 := $(foreach s,2.12 2.13,connector/spark-3.5/target/scala-$(s)/spark-kafka-share-spark35_$(s)-assembly-$(VERSION).jar)
KAFKA_PORT ?= 9092
export KAFKA_BOOTSTRAP_SERVERS ?= localhost:$(KAFKA_PORT)
# ScalaTest's broker, one of its own (KAFKA_PORT + 100): make test runs ScalaTest beside pytest, whose tests
# stop and restart the local broker, and BrokerPauseSuite pauses the broker it runs against.
SCALA_KAFKA_PORT := $(shell expr $(KAFKA_PORT) + 100)
SCALA_KAFKA := KAFKA_PORT=$(SCALA_KAFKA_PORT) KAFKA_CONTROLLER_PORT=$(shell expr $(SCALA_KAFKA_PORT) + 1) \
  KAFKA_DATA_DIR=$(CURDIR)/target/kafka-local-scala/data KAFKA_BOOTSTRAP_SERVERS=localhost:$(SCALA_KAFKA_PORT)
export SPARK_KAFKA_SHARE_JAR := $(CURDIR)/$(JAR)
SBT := ./dev/sbt
# The Scala and Java examples (examples/), which integration-tests/test_examples.py runs with spark-submit.
EXAMPLES_JAR := examples/target/examples.jar

WHEEL := dist/spark_kafka_share-$(subst -SNAPSHOT,,$(VERSION))-py3-none-any.whl
# pyspark and its dependencies as local wheels, for the test that installs the wheel with pip --no-index.
WHEELHOUSE := dist/wheelhouse
export SPARK_KAFKA_SHARE_WHEEL := $(CURDIR)/$(WHEEL)
export SPARK_KAFKA_SHARE_WHEELHOUSE := $(CURDIR)/$(WHEELHOUSE)

.PHONY: help venv jar wheel kafka-up kafka-down demo test test-unit test-scala test-python test-extended test-cluster test-compat test-compat-oldest publish-local test-packages fault-matrix lint format bench clean

help:
	@echo "make demo        build, start a local Kafka broker, run a kafka-share streaming query on it"
	@echo "make test        every test: ScalaTest, lint and type checks, pytest against the real broker"
	@echo "make test-unit   the ScalaTest suites that need no broker (the executor's protocol, options, records log)"
	@echo "make test-scala  every ScalaTest suite, against a Kafka broker of its own on KAFKA_PORT + 100"
	@echo "make test-python pytest (python/tests, integration-tests) against the local broker, after make lint"
	@echo "make fault-matrix every case of the fault-injection matrix (make test runs a part of it; ~30 min)"
	@echo "make test-extended the slow cases make test leaves out, and the tests on brokers of other Kafka"
	@echo "                 releases: Kafka 4.1's refusal, Kafka 4.4's dead-letter queues (~8 min)"
	@echo "make test-cluster the faults of a three-node Kafka cluster during drains (~20 min)"
	@echo "make test-compat the compatibility subset on Spark 3.5, 4.0, 4.1, 4.2, 4.3 and Kafka 4.1 to 4.4"
	@echo "make test-compat-oldest the compatibility subset on Spark 3.5 with Scala 2.12 only (make test runs it)"
	@echo "make publish-local a Maven repository of the connector in target/maven-repo; make test-packages uses it"
	@echo "make test-packages spark-submit --packages from target/maven-repo, beside Spark's own kafka source"
	@echo "make lint        scalafmt, ruff and mypy checks (make test runs them first)"
	@echo "make format      formats the Scala and Python sources as make lint checks them"
	@echo "make bench       throughput and latency against Kafka's perf tool; BENCH_ARGS passes options (docs/benchmarks.md)"
	@echo "make jar         the connector assembly ($(JAR)) and the examples' jar ($(EXAMPLES_JAR))"
	@echo "make wheel       the Python package with the connector jars inside ($(WHEEL))"
	@echo "make venv        the virtualenv $(VENV) with the tools of python/requirements-dev.txt"
	@echo "make kafka-up    start the local Kafka 4.3 broker on $(KAFKA_BOOTSTRAP_SERVERS); make kafka-down stops it"
	@echo "                 (make kafka-down; KAFKA_BROKER_VERSION=4.4.0 make test: the broker and tools of another Kafka release)"
	@echo "make kafka-down  stop the local broker and ScalaTest's"
	@echo "make clean       remove the build outputs (connector/target, target, project/target, dist, ...)"
	@echo "make help        this list"

$(VENV)/.installed: python/requirements-dev.txt
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install --quiet --upgrade pip
	$(VENV_PY) -m pip install --quiet -r python/requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

# Spark 4.3.0 jars come from the venv's pyspark (they are not on Maven Central), so the venv comes first.
# One sbt run builds every jar: sbt's start-up is most of the time of an incremental build.
# The examples' jar comes with it: compiling them checks them against the connector's API.
$(JAR) $(JARS_SPARK35) $(EXAMPLES_JAR) &: $(VENV)/.installed build.sbt project/plugins.sbt project/build.properties $(shell find connector/src/main examples/scala examples/java -type f)
	$(SBT) connector/assembly examples/package connectorSpark35/assembly "++2.13.16 connectorSpark35/assembly" < /dev/null

jar: $(JAR) $(JARS_SPARK35) $(EXAMPLES_JAR)

# The Python package with the connector jars inside; it picks the one for the Spark it runs on.
$(WHEEL): $(JAR) $(JARS_SPARK35) $(shell find python/spark_kafka_share -name '*.py') python/pyproject.toml
	PYTHON=$(VENV_PY) python/build-wheel.sh dist $(JAR) $(JARS_SPARK35)

wheel: $(WHEEL)

# pyspark-client is the Spark Connect-only install (no JVM, no py4j). Its newest release on PyPI is 4.2.0;
# Connect serves clients of an earlier release, so it reads from the tests' Spark 4.3 Connect server.
PYSPARK_CLIENT := pyspark-client==4.2.0

# The pins of requirements-dev.txt constrain the wheels; pip takes no extras (moto[server]) in a constraint.
$(WHEELHOUSE)/.done: $(VENV)/.installed
	mkdir -p $(WHEELHOUSE)
	sed 's/\[[^]]*\]//' python/requirements-dev.txt > $(WHEELHOUSE)/constraints.txt
	$(VENV_PY) -m pip wheel --quiet -w $(WHEELHOUSE) -c $(WHEELHOUSE)/constraints.txt \
	  $$(grep '^pyspark==' python/requirements-dev.txt) $(PYSPARK_CLIENT)
	touch $@

kafka-up:
	dev/kafka-local/kafka-local start

kafka-down:
	dev/kafka-local/kafka-local stop
	$(SCALA_KAFKA) dev/kafka-local/kafka-local stop

# Installs the wheel into the venv, as a user would pip-install it, and runs dev/demo.
demo: $(WHEEL) kafka-up
	$(VENV_PY) -m pip install --quiet --no-deps --force-reinstall $(WHEEL)
	dev/demo

# ScalaTest's broker lives as long as the suites: it starts fresh and is stopped (its data deleted) after.
test-scala: $(VENV)/.installed
	$(SCALA_KAFKA) dev/kafka-local/kafka-local start
	$(SCALA_KAFKA) $(SBT) connector/test < /dev/null; status=$$?; \
	$(SCALA_KAFKA) dev/kafka-local/kafka-local stop; exit $$status

# The ScalaTest suites that need no broker and no S3 emulator (those tagged UsesLocalServices are left out):
# the option checks, the records log, and every transition of the executor's protocol, in under a minute.
test-unit: $(VENV)/.installed
	$(SBT) "connector/testOnly -- -l io.github.sparkkafkashare.UsesLocalServices" < /dev/null

lint: $(VENV)/.installed
	$(SBT) scalafmtCheckAll < /dev/null
	$(VENV)/bin/ruff check python integration-tests benchmarks examples
	$(VENV)/bin/ruff format --check python integration-tests benchmarks examples
	$(VENV)/bin/mypy --config-file python/pyproject.toml python/spark_kafka_share

# One pytest run for Python unit tests and the integration suites, so its summary is the last line.
# The fault matrix's cases marked full_matrix_only, and the slow cases marked extended, would take CI
# past its time budget: see fault-matrix and test-extended. The slowest tests are listed, to watch that
# budget (CI has 90 minutes; `.ci/run` should stay under 40).
PYTEST_OF_MAKE_TEST := $(VENV)/bin/pytest -m "not full_matrix_only and not extended and not packages and not cluster_only" \
  --durations=40 python/tests integration-tests

test-python: $(JAR) $(WHEEL) $(WHEELHOUSE)/.done kafka-up lint
	$(PYTEST_OF_MAKE_TEST)

# The slow cases make test leaves out; each has a faster case in make test that covers its behaviour.
# Also the modules that start brokers of other Kafka releases beside the local one: test_broker_versions.py
# (Kafka 4.1's refusal) and test_broker_dead_letters.py (Kafka 4.4's dead-letter queues, and 4.3's refusal);
# and the secrets audit of every JVM of an application (test_secrets_audit.py, five to ten minutes).
# python/tests is collected too (none of it is extended): collecting it puts the package on the path.
test-extended: $(JAR) $(WHEEL) kafka-up
	$(VENV)/bin/pytest -m extended python/tests integration-tests

# The compatibility subset (tests marked compat) on every supported Spark line, each from its own
# pyspark in .cache/compat/ (Spark 3.5 with Scala 2.12 and 2.13), on Java 25, and on Kafka 4.1
# (refused), 4.2, 4.3 and 4.4 brokers; prints the table the user guide shows. COMPAT_PYSPARK,
# COMPAT_SCALA213, COMPAT_NEWER_JDK and COMPAT_BROKERS choose the rows (dev/compat/run).
test-compat: $(WHEEL) $(WHEELHOUSE)/.done kafka-up
	dev/compat/run

# A Maven repository in target/maven-repo, as Maven Central wants it: each build's shaded jar, with a
# POM that declares no kafka-clients or jose4j, sources, javadoc, licence and SCM.
publish-local: $(VENV)/.installed
	$(SBT) connector/publish connectorSpark35/publish "++2.13.16 connectorSpark35/publish" < /dev/null

# spark-submit --packages from that repository, with a clean Ivy home, beside Spark's own kafka source.
test-packages: publish-local kafka-up
	PYTHONPATH=python $(VENV)/bin/pytest -m packages integration-tests/test_maven_packages.py

# The subset on the oldest supported line, Spark 3.5 with Scala 2.12: make test runs it beside pytest.
test-compat-oldest: $(WHEEL) kafka-up
	COMPAT_PYSPARK=3.5.9 COMPAT_SCALA213= COMPAT_BROKERS= COMPAT_NEWER_JDK= dev/compat/run

# Every fault of a three-node Kafka cluster (a leader paused past the lock, a leader or the group's
# coordinator or the active controller killed, a rolling restart), under none and two-phase-commit;
# the test module starts the cluster (KAFKA_LOCAL_BROKERS=3 dev/kafka-local/kafka-local) and stops it.
test-cluster: $(JAR) kafka-up
	PYTHONPATH=python $(VENV)/bin/pytest -s integration-tests/test_cluster_faults.py

# Every case of the fault-injection matrix, and of a standalone Spark cluster's lost workers; prints the
# table docs/delivery-guarantees.md shows.
# PYTHONPATH: the tests that drain in the test's own Spark session import spark_kafka_share from this
# checkout (make test collects python/tests, which puts it on the path).
fault-matrix: $(JAR) kafka-up
	PYTHONPATH=python $(VENV)/bin/pytest integration-tests/test_fault_matrix.py integration-tests/test_standalone_cluster.py

# Beside pytest, at a lower CPU priority (pytest is the longer): ScalaTest against a broker of its own,
# then the compatibility subset on Spark 3.5 (test-compat-oldest) against a fresh one on the same port,
# which pytest's broker restarts do not touch. ScalaTest mostly waits out lock and poll windows and the
# subset is 31 short queries, so they cost pytest little of the 2 cores. Their output goes to
# target/test-scala.log and target/test-compat-oldest.log, shown once pytest has ended: whole if they
# failed (ScalaTest's failed cases then last: the end of a CI log is what shows first), else summaries.
test: $(JAR) $(WHEEL) $(WHEELHOUSE)/.done kafka-up lint
	@mkdir -p target
	@echo "make test: ScalaTest, then Spark 3.5's compatibility subset, run beside pytest (target/test-scala.log, target/test-compat-oldest.log)"
	@nice -n 10 sh -c '$(MAKE) --no-print-directory test-scala > target/test-scala.log 2>&1; scala=$$?; \
	  $(SCALA_KAFKA) $(MAKE) --no-print-directory test-compat-oldest > target/test-compat-oldest.log 2>&1; compat=$$?; \
	  $(SCALA_KAFKA) dev/kafka-local/kafka-local stop > /dev/null 2>&1; \
	  exit $$(( (scala != 0) + 2 * (compat != 0) ))' & beside=$$!; \
	$(PYTEST_OF_MAKE_TEST); pytest=$$?; \
	wait $$beside; beside=$$?; \
	if [ $$(( beside & 2 )) -ne 0 ]; then cat target/test-compat-oldest.log; else tail -4 target/test-compat-oldest.log; fi; \
	if [ $$(( beside & 1 )) -ne 0 ]; then cat target/test-scala.log; \
	  echo "ScalaTest's failed cases (target/test-scala.log):"; \
	  grep -E -A4 '\*\*\* (FAILED|ABORTED) \*\*\*' target/test-scala.log | grep -E '^\[info\]|^--'; \
	else grep -E '^\[info\] (Run completed|Tests: |All tests passed)' target/test-scala.log; fi; \
	[ $$pytest -eq 0 ] && [ $$beside -eq 0 ]

# Formats the Scala sources (.scalafmt.conf) and the Python ones, as make lint checks them.
format: $(VENV)/.installed
	$(SBT) scalafmtAll < /dev/null
	$(VENV)/bin/ruff format python integration-tests benchmarks examples

clean:
	rm -rf connector/target target project/target project/project dev/kafka-local/target examples/target dist

# Throughput, batch latency and heap of kafka-share against Kafka's own share-consumer perf tool, on
# the local broker (not part of `make test`). BENCH_RECORDS and BENCH_WORK_RECORDS size the data;
# BENCH_ARGS passes options to benchmarks/bench.py, e.g. BENCH_ARGS="--sections d" for one section.
# Each run writes benchmarks/results/<UTC time>.json, which git ignores (docs/benchmarks.md).
bench: $(JAR) $(VENV)/.installed kafka-up
	$(VENV_PY) benchmarks/bench.py --jar $(JAR) $(BENCH_ARGS)
