# fencedlake developer commands. The two that matter: `make demo`, `make test`.
#   VENV=/path make test   uses another virtualenv (default .venv in the checkout)

SHELL := /bin/bash
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
export VENV

.PHONY: help bootstrap demo test unit wheel integration interop bench lint clean distclean services-stop

help:
	@echo "make demo         set up .venv, then run a local demo write + read"
	@echo "make test         set up .venv, then run everything CI runs (scripts/test.sh)"
	@echo "make unit         hermetic tests only (pytest tests, two workers)"
	@echo "make wheel        the built wheel in a fresh venv without extras: batch + stream writes"
	@echo "make integration  real PostgreSQL + S3 on 127.0.0.1, pytest integration"
	@echo "make interop      Iceberg's Java implementation beside us (jars from Maven Central, .venv-interop)"
	@echo "make bench        full benchmarks (python -m benchmarks.run --full)"
	@echo "make lint         ruff + mypy"
	@echo "make clean        stop services, remove caches and local state (keeps .venv)"
	@echo "make distclean    clean + remove .venv"

bootstrap:
	scripts/bootstrap.sh

demo: bootstrap
	PYSPARK_PYTHON=$(PY) PYSPARK_DRIVER_PYTHON=$(PY) $(PY) -m pyspark_fenced_sink.demo

test: bootstrap
	scripts/test.sh

unit: bootstrap
	scripts/test.sh unit

wheel: bootstrap
	scripts/test.sh wheel

integration: bootstrap
	scripts/test.sh integration

interop: bootstrap
	scripts/test.sh interop

bench: bootstrap
	PYSPARK_PYTHON=$(PY) PYSPARK_DRIVER_PYTHON=$(PY) $(PY) -m benchmarks.run --full

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

services-stop:
	-integration/services/iceberg_rest.sh stop
	-integration/services/rest.sh stop
	-integration/services/gcs.sh stop
	-integration/services/azurite.sh stop
	-integration/services/s3.sh stop
	-integration/services/postgres.sh stop

clean: services-stop
	rm -rf .integration .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info \
	       fencedlake-warehouse spark-warehouse metastore_db derby.log .benchmarks-out
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(VENV).bootstrap.lock .venv-interop .venv-interop.bootstrap.lock .jvm
