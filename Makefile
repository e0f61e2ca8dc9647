# The two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit integration cli install jars stack-up stack-down bench bench-peers clean docker-up docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

jars: install
	$(BIN)/arfl stack install

demo: jars
	$(BIN)/arfl stack up
	$(BIN)/arfl deploy configs/clicks.toml

test: jars lint
	$(BIN)/pytest -q tests

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -q tests/unit tests/cli

integration: jars
	$(BIN)/pytest -q tests/integration

# The references generated from the code (tests/unit/test_reference_docs.py fails when stale).
docs: install
	$(BIN)/python -m arfl.configs.reference docs/spec.md
	$(BIN)/python -m arfl.faults.reference docs/faults.md

docker-up:
	scripts/docker-up

stack-up: jars
	$(BIN)/arfl stack up

stack-down: install
	$(BIN)/arfl stack down

# arfl beside Flink and Kafka Streams on the same load (bench/peers.py): one run of 160 s of
# input per system and variant; fetches Flink's wheels and builds the Kafka Streams app with
# Maven on first use.
bench-peers: jars
	$(BIN)/arfl stack up
	$(BIN)/python bench/peers.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
