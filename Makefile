# cdcpipe: `make demo` and `make test` are the quick start; each installs what is missing first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
CDCPIPE := $(VENV)/bin/cdcpipe
PYTEST_ARGS ?=

.PHONY: help install install-base install-demo class-archive lint typecheck check test test-stack unit demo up down status bench chaos chaos-cluster clean docs

help:
	@echo "make demo       install what is missing, start the stack, run a sample through it, show the result"
	@echo "make test       install what is missing, lint, type-check, run every test against the real stack"
	@echo "make check      the inner loop: lint (with the import layers), types, unit tests; nothing running needed"
	@echo "make unit       the tests that need nothing running"
	@echo "make bench      the benchmarks (JSON and plots in bench/results/)"
	@echo "make chaos      a 10-minute soak: every job kind under load while the pipeline's parts are killed; checks each against Postgres"
	@echo "make chaos-cluster   the soak on 3 Kafka nodes, 2 Connect workers and 2 Spark workers, with each's faults"
	@echo "make up|status|down   the local stack (cdcpipe stack ...)"
	@echo "make lock       re-pin the full Python dependency closure into infra/python.lock"
	@echo "make docs       regenerate the settings reference in docs/configuration.md from the settings models"
	@echo "make clean      stop the stack and delete its data (jars and the virtual environment stay)"

install: install-base class-archive

# What `make test` needs before lint and types; the Spark driver's class archive (a JVM's work) is built beside them.
install-base:
	@python3 infra/install.py --for test

# What the demo runs on, and no more: no browser (the tests' alone), no class archive (its one driver does not repay it).
install-demo:
	@python3 infra/install.py --for demo

# A Spark driver's class-data archive, which every later driver maps: the stage that starts drivers builds it.
class-archive: install-base
	@$(PY) -m streaming_jobs.class_archive

lock: install
	@$(PY) -m pip freeze --all --exclude-editable | LC_ALL=C sort > infra/python.lock
	@echo "wrote infra/python.lock"

# lint-imports keeps the layers ([tool.importlinter] in pyproject.toml): no upward import, no import circle.
lint: install-base
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: install-base
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict bench

unit: install
	$(VENV)/bin/pytest -m "not integration" -n 2 $(PYTEST_ARGS)

check: lint typecheck unit

# The session fixture starts the stack when CDCPIPE_KAFKA_BOOTSTRAP is not set, and stops what it started.
# One stack for the whole suite, the tests in parallel (three workers); those that stop services on stacks of their own (tests/suite.py).
test: install-base
	$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck class-archive test-stack
	$(PY) -m tests.suite $(PYTEST_ARGS)

# The suite's stack, started beside the checks and the class archive (a minute of waiting on JVMs, overlapped);
# tests.suite takes it as its own and stops it at the end.
test-stack: install-base
	$(PY) -m tests.suite --start-only

demo: install-demo
	$(CDCPIPE) stack up --spark-cluster
	$(CDCPIPE) demo

up: install
	$(CDCPIPE) stack up

status:
	$(CDCPIPE) stack status

down:
	$(CDCPIPE) stack down

# The settings reference in docs/configuration.md, from the models `--help` reads (a unit test checks it).
docs: install
	$(PY) -m cdcpipe.cli.reference

clean:
	-$(CDCPIPE) stack down --purge

# Benchmarks print JSON (and write it under bench/results/); `make test` runs each once with tiny sizes.
# stack_startup measures `stack up` itself, so it runs with the stack down; the relay benchmark needs it up.
bench: install
	$(CDCPIPE) stack down
	$(PY) bench/stack_startup.py
	$(PY) bench/driver_start.py
	$(CDCPIPE) stack up
	$(PY) bench/relay_bench.py
	$(PY) bench/catch_up_bench.py
	$(PY) bench/jobs_bench.py --s3-runs 1
	$(PY) bench/jobs_bench.py --lakes local --drift-minutes 10
	CDCPIPE_BENCH_RESULTS=bench/results/mirror $(PY) bench/jobs_bench.py --lakes local --drift-minutes 10 --drift-kind table_mirror
	$(PY) bench/batch_bench.py
	$(PY) bench/replay_bench.py
	$(PY) bench/snapshot_bench.py
	$(PY) bench/table_read_bench.py
	$(PY) bench/merge_bench.py
	$(PY) bench/upkeep_bench.py
	$(CDCPIPE) stack down
	CDCPIPE_KAFKA_PLAINTEXT_PORT=9094 $(CDCPIPE) stack up
	CDCPIPE_KAFKA_PLAINTEXT_PORT=9094 $(PY) bench/tls_bench.py
	$(CDCPIPE) stack down
	$(CDCPIPE) stack up

# The soak run: the whole pipeline, all five job kinds, under load for 10 minutes while the relay, a job's
# driver, Kafka Connect, Kafka and Postgres are killed and restarted in turn; then each read model is checked
# against Postgres (bench/chaos.py; writes bench/results/chaos.json, exits 1 on anything missing, doubled or
# out of order). A short version (each fault once) runs in `make test`.
chaos: install
	$(CDCPIPE) stack up
	$(PY) bench/chaos.py

# The soak on production's shape: three Kafka nodes, two Connect workers, the jobs' executors on two Spark workers,
# every fault of bench/chaos.py. In a home of its own (.stack/cluster, sharing the jars): the one-node stack stops first.
chaos-cluster: install
	$(CDCPIPE) stack down
	mkdir -p .stack/cluster && ln -sfn ../lib .stack/cluster/lib && ln -sfn ../bin .stack/cluster/bin
	CDCPIPE_HOME=$(CURDIR)/.stack/cluster $(CDCPIPE) stack up --cluster
	CDCPIPE_HOME=$(CURDIR)/.stack/cluster $(PY) bench/chaos.py --jobs-on-cluster --results bench/results/chaos-cluster.json
