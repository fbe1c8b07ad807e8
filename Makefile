# One-command set-up: every target below creates the venv and the local
# environment it needs (PostgreSQL, Airflow metadata DB, pools) by itself.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
RUN := set -a && . ./.local/env && set +a && PATH="$(BIN):$$PATH" &&
# pytest-xdist workers for `make test`, each with databases of its own (make test-env).
TEST_WORKERS ?= 2
# The tests' own Airflow home and metadata database (see scripts/devenv.py).
TEST_RUN := $(RUN) export AIRFLOW_HOME="$$RETENTION_TEST_AIRFLOW_HOME" \
	AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$$RETENTION_TEST_SQL_ALCHEMY_CONN" \
	AIRFLOW__LOGGING__BASE_LOG_FOLDER="$$RETENTION_TEST_AIRFLOW_HOME/logs" &&

.PHONY: demo demo-data sandbox cli test test-env unit mutation airflow bench-rows bench-remote bench-partitions bench-scale bench-foreground lint docs docs-build format schema lock env stop-pg clean

$(STAMP): requirements.txt requirements-dev.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	touch $@

env: $(STAMP)
	$(BIN)/python scripts/devenv.py
	@$(RUN) airflow db migrate > .local/db-migrate.log 2>&1 || { tail -40 .local/db-migrate.log; exit 1; }
	@$(RUN) python scripts/load_settings.py 2>>.local/db-migrate.log

demo: env
	@$(RUN) python scripts/demo.py

# Reseed both demo tables (the demo deleted what was old), e.g. make demo-data ARGS="--rows 50000".
demo-data: env
	@$(RUN) python scripts/demo_data.py $(ARGS)

# The sandbox API's faults while `make airflow` serves it, e.g. make sandbox ARGS="reject --oldest 5",
# ARGS="hold asset-0000007", ARGS="storm 120", ARGS="latency 500", ARGS="clear", ARGS="stats".
sandbox: $(STAMP)
	@test -f .local/env || $(MAKE) --no-print-directory env
	@$(RUN) python scripts/sandbox.py $(ARGS)

# The operator's command line, e.g. make cli ARGS="explain 896bc2f1" or
# make cli ARGS="dead-letters --failure-class"; it reads .local/env itself.
cli: $(STAMP)
	@test -f .local/env || $(MAKE) --no-print-directory env
	@PYTHONPATH=plugins $(BIN)/python -m retention.cli $(ARGS)

# The tests' databases and Airflow home, and a copy of them for each pytest worker but
# the first (scripts/devenv.py --test-workers). Not `env`: the tests never use the demo's
# metadata database or its settings.
test-env: $(STAMP)
	$(BIN)/python scripts/devenv.py
	@$(TEST_RUN) airflow db migrate > .local/test-db-migrate.log 2>&1 || { tail -40 .local/test-db-migrate.log; exit 1; }
	@$(BIN)/python scripts/devenv.py --test-workers $(TEST_WORKERS)

# Every tier (pyproject's testpaths: unit, dag, integration, e2e) on TEST_WORKERS
# pytest-xdist workers, the longest files first (see tests/support/workers.py): most
# tests wait on a scheduler or a subprocess, so two workers overlap waiting with work.
test: test-env lint docs-build
	@$(TEST_RUN) pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Pure unit tests: no database, no Airflow home; seconds on a fresh clone.
unit: $(STAMP)
	PYTHONPATH=plugins:. $(BIN)/pytest tests/unit -q

# Mutation testing of the pure modules against the unit tests (minutes; not part of CI).
mutation: $(STAMP)
	cd scripts && $(BIN)/python mutation.py

# Regenerate the policies file's JSON Schema, and the field table and DAG steps in docs/, from the model,
# and include/sql/schema.sql from a scratch database migrated on the local server.
schema: $(STAMP)
	PYTHONPATH=plugins $(BIN)/python -m retention.cli schema --write
	@test -f .local/env || $(MAKE) --no-print-directory env
	@$(RUN) python -m retention.cli --dsn "$$RETENTION_DEMO_DSN" schema --sql --write

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The documentation site (mkdocs.yml, pages in docs/): served with live reload, and built
# with --strict (a broken link or anchor, or a page missing from the nav, fails) into .local/site.
docs: $(STAMP)
	$(BIN)/mkdocs serve -a 127.0.0.1:8000

docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# airflow standalone, with the sandbox deletion API (:8765) and the event receiver (:8766)
# that the demo policies' connections name; both stop when Airflow does, and the demo
# policies' DAGs are unpaused once parsed. `exec`: a SIGTERM to make reaches the script
# (the shell would die and leave it running), and the script stops all of Airflow.
airflow: env
	@$(RUN) exec python scripts/dev_services.py --unpause-demo -- airflow standalone

# Every bench target passes ARGS on to its script, e.g. make bench-scale ARGS="--executor celery".
bench-rows: env
	@$(RUN) python scripts/bench_rows.py $(ARGS)

bench-remote: env
	@$(RUN) python scripts/bench_remote.py $(ARGS)

bench-partitions: env
	@$(RUN) python scripts/bench_partitions.py $(ARGS)

bench-scale: env
	@$(RUN) python scripts/bench_scale.py $(ARGS)

bench-foreground: env
	@$(RUN) python scripts/bench_foreground.py $(ARGS)

# Re-pin every transitive dependency after changing requirements*.txt.
lock:
	$(PYTHON) -m venv .local/lockvenv
	.local/lockvenv/bin/pip install --quiet -r requirements-dev.txt
	.local/lockvenv/bin/pip freeze --exclude-editable | grep -v '^pip==' > constraints.txt
	rm -rf .local/lockvenv

# Stop the embedded PostgreSQL (only started when no other server was found).
stop-pg:
	@if [ -x $(BIN)/python ]; then $(BIN)/python scripts/devenv.py --stop; fi

clean: stop-pg
	rm -rf $(VENV) .local
