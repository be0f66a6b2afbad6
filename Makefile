# Two commands on a fresh machine: `make demo` and `make test`. Everything else is a step of those.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
CONSTRAINTS := .ci/constraints.txt
INSTALLED := $(VENV)/.installed
# The provider's own Spark is the pyspark of $(VENV) (4.2: the NEW version of the Spark-upgrade
# tests, and the Spark that writes Spark 4.1/4.2's checkpoint formats). The OLD versions of the
# Spark-upgrade tests each have a virtualenv of their own: v1 on 3.5 or 4.0, v2 on 4.2.
SPARK35_VENV ?= .venv-spark35
SPARK35 := $(SPARK35_VENV)/.installed
SPARK40_VENV ?= .venv-spark40
SPARK40 := $(SPARK40_VENV)/.installed
PYTEST_ARGS ?=
# The release as a user installs it: the wheel from dist/ (not editable, no checkout on sys.path) in
# a clean virtualenv of its own with only the `spark` extra, under the same constraints as $(VENV).
WHEEL_VENV ?= .venv-wheel
WHEEL_PY := $(WHEEL_VENV)/bin/python
WHEEL_INSTALLED := $(WHEEL_VENV)/.installed
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' airflow_ckpt_provider/__init__.py)
WHEEL := dist/airflow_ckpt_provider-$(VERSION)-py3-none-any.whl
WHEEL_SOURCES := $(shell find airflow_ckpt_provider -type f -not -path '*/__pycache__/*') \
  setup.cfg pyproject.toml README.md LICENSE

# pyspark-client (from the spark provider) and full pyspark share files: make sure the full one wins
# in the virtualenv of the python $(1)
define full_pyspark
@$(1) -c 'import pathlib, pyspark, sys; sys.exit(not (pathlib.Path(pyspark.__file__).parent / "jars").is_dir())' || \
  $(1) -m pip install --quiet --no-deps --force-reinstall -c $(CONSTRAINTS) pyspark
endef

.PHONY: help dist wheel-venv venv jvm spark35 spark40 hdfs yarn browser airflow-home lint test unit integration test-hdfs test-yarn system demo demo-sample docs docs-sync bench clean

help:
	@echo "make demo    run the reference upgrade end to end on the embedded local stack, with its proof"
	@echo "make test    install everything (virtualenv, JVM jars, the wheel in $(WHEEL_VENV)) and run every test tier"
	@echo "make dist    build the sdist and the wheel into dist/ (python -m build)"
	@echo "make wheel-venv install the wheel from dist/ into $(WHEEL_VENV), as a user installs it (the tests run it)"
	@echo "make lint | unit | integration | system | docs | docs-sync | bench | clean"
	@echo "make demo-sample record the last demo run in docs/samples/demo/ and sync the pages that quote it"
	@echo "make spark35 install pyspark 3.5 in $(SPARK35_VENV) with its Kafka connector (the Spark-upgrade tests)"
	@echo "make spark40 install pyspark 4.0 in $(SPARK40_VENV) with its Kafka connector (the Spark-upgrade tests)"
	@echo "make hdfs    resolve the single-node HDFS jars (Hadoop 3.4.1) the HDFS tests start"
	@echo "make test-hdfs run only the tests on a real HDFS (they are also part of make integration)"
	@echo "make yarn    resolve the single-node YARN jars (Hadoop 3.4.1) the cluster-mode tests start"
	@echo "make test-yarn run the tests on a real YARN (not part of make test yet: see the test target)"
	@echo "make browser check for the Chromium the browser tests drive (installs Debian's chromium as root)"

$(INSTALLED): setup.cfg pyproject.toml $(CONSTRAINTS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || \
	  { echo "error: '$(PYTHON)' is missing or older than 3.11; install Python 3.11+ or run 'make PYTHON=/path/to/python3.11 ...'"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e '.[spark,report,s3,dev]'
	$(call full_pyspark,$(PY))
	$(PY) -m pip check
	touch $@

venv: $(INSTALLED)

# the release artifacts: the sdist and the wheel (the package, its POMs, py.typed and the license;
# no tests, no harness); rebuilt when a file of the package or its metadata changed
$(WHEEL): $(INSTALLED) $(WHEEL_SOURCES)
	rm -rf dist
	$(PY) -m build --outdir dist .

dist: $(WHEEL)

# the wheel installed as the installation page says, then `pip check`; redone (from an empty
# virtualenv) when the wheel or the constraints changed. tests/integration/test_installed_wheel.py
# and the own-job page's system test run it from outside the checkout.
$(WHEEL_INSTALLED): $(WHEEL) $(CONSTRAINTS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || \
	  { echo "error: '$(PYTHON)' is missing or older than 3.11; install Python 3.11+ or run 'make PYTHON=/path/to/python3.11 ...'"; exit 2; }
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_PY) -m pip install --quiet --upgrade pip
	$(WHEEL_PY) -m pip install --quiet -c $(CONSTRAINTS) '$(WHEEL)[spark]'
	$(call full_pyspark,$(WHEEL_PY))
	$(WHEEL_PY) -m pip check
	touch $@

wheel-venv: $(WHEEL_INSTALLED)

jvm: venv
	$(PY) -m airflow_ckpt_provider.local.jvm fetch

# pyspark 3.5 (the version the connector's POM pins) in its own virtualenv, this checkout's
# package importable there (no Airflow), and its Kafka connector jars: only the tiers that run a
# Spark 3.5 job depend on it
$(SPARK35): $(INSTALLED) airflow_ckpt_provider/local/maven/spark35-kafka/pom.xml
	CKPT_SPARK35_VENV=$(SPARK35_VENV) $(PY) -m airflow_ckpt_provider.local.spark install 3.5
	touch $@

spark35: $(SPARK35)

# pyspark 4.0 likewise: the other OLD version of the Spark-upgrade tests (v1 on 4.0, v2 on 4.2),
# and the Spark whose state format v2 a newer state reader cannot read
$(SPARK40): $(INSTALLED) airflow_ckpt_provider/local/maven/spark40-kafka/pom.xml
	CKPT_SPARK40_VENV=$(SPARK40_VENV) $(PY) -m airflow_ckpt_provider.local.spark install 4.0
	touch $@

spark40: $(SPARK40)

# a single-node HDFS (NameNode + DataNode, Hadoop 3.4.1 from Maven) for the HDFS tests; a no-op once
# resolved (the POM's hash is stamped)
hdfs: venv
	$(PY) -m airflow_ckpt_provider.local.jvm fetch hdfs

# a single-node YARN (ResourceManager + NodeManager, Hadoop 3.4.1 from Maven) for the cluster-mode
# tests; a no-op once resolved
yarn: venv
	$(PY) -m airflow_ckpt_provider.local.jvm fetch yarn

# The browser tests (tests/system/test_approval_browser.py) drive the system's Chromium with
# Playwright (the `dev` extra); Playwright's own browser download is not used. CKPT_CHROMIUM
# names another binary.
browser:
	@if [ -n "$$CKPT_CHROMIUM" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
	  echo "error: found no chromium or chromium-browser on PATH (and CKPT_CHROMIUM is not set);"; \
	  echo "  expected a Chromium binary for the browser tests (tests/system/test_approval_browser.py);"; \
	  echo "  install it: 'sudo apt-get install chromium' (Debian/Ubuntu), or set CKPT_CHROMIUM=/path/to/chromium"; \
	  exit 2; \
	fi

lint: venv
	$(BIN)/ruff check airflow_ckpt_provider dags bench tests docs/hooks.py
	$(BIN)/mypy

# The system tier runs beside the unit and integration tiers: its DAG runs mostly wait on Spark
# start-ups, triggers and Kafka, so on 2 cores both together take little longer than the system
# tier alone. Each pytest has its own Airflow home and broker; the system tier's output is printed
# when it ends ($(TIERS)/system.log while it runs). `make unit`, `make integration`, `make system`
# and `make test-yarn` run one tier in the foreground. The YARN tests (system tests marked `yarn`:
# HDFS, a ResourceManager and a NodeManager, Spark in cluster mode) are not part of `make test`
# yet: on 2 cores they add 10-30 minutes of load to a run that is already at CI's limit; run them
# with `make test-yarn`.
TIERS := .work/tiers
test: lint jvm spark35 spark40 hdfs browser wheel-venv
	@mkdir -p $(TIERS); rm -f $(TIERS)/system.log $(TIERS)/system.rc; \
	  echo "system tier started in the background: $(TIERS)/system.log"; \
	  ( CKPT_TEST_AIRFLOW_HOME=$(CURDIR)/.airflow/tests-system $(PY) -m pytest -m "not yarn" tests/system \
	      $(PYTEST_ARGS) > $(TIERS)/system.log 2>&1; echo $$? > $(TIERS)/system.rc ) & \
	  $(PY) -m pytest tests/unit tests/integration $(PYTEST_ARGS); fast=$$?; \
	  wait; echo "== system tier ($(TIERS)/system.log)"; cat $(TIERS)/system.log; \
	  system=$$(cat $(TIERS)/system.rc 2>/dev/null || echo 1); \
	  echo "unit + integration: exit $$fast; system: exit $$system"; \
	  [ "$$fast" = 0 ] && [ "$$system" = 0 ]

unit: venv
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: jvm spark35 spark40 hdfs wheel-venv
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

# the YARN tests alone (HDFS and YARN start in ~15 s; each test runs Spark in cluster mode)
test-yarn: jvm hdfs yarn
	$(PY) -m pytest -m yarn tests/system $(PYTEST_ARGS)

# the HDFS tier alone (about a minute: HDFS starts in ~10 s); make integration runs it too
test-hdfs: jvm hdfs
	$(PY) -m pytest -m hdfs tests/integration $(PYTEST_ARGS)

system: jvm spark35 spark40 browser wheel-venv
	$(PY) -m pytest -m "not yarn" tests/system $(PYTEST_ARGS)

demo: jvm
	$(PY) -m tests.harness.demo

docs: venv
	$(BIN)/mkdocs build --strict -f docs/mkdocs.yml

# rewrite the code blocks the pages copy from the repository (docs/hooks.py); the build and
# tests/unit/test_docs_sources.py fail while a copy differs from its source
docs-sync: venv
	$(PY) docs/hooks.py

# the last `make demo` run (its demo-report.json and the report it names) becomes the docs' sample
demo-sample: venv
	$(PY) docs/hooks.py --record-demo

bench: jvm hdfs yarn
	@failed=""; for script in bench/*.py; do echo "== $$script"; $(PY) $$script || failed="$$failed $$script"; done; \
	  if [ -n "$$failed" ]; then echo "below target or failed:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV) $(SPARK35_VENV) $(SPARK40_VENV) $(WHEEL_VENV) dist .venv-s3 .jvm .airflow .work site .pytest_cache .hypothesis demo-report.json
