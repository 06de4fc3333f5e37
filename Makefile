# The README's commands. Each bootstraps .venv from nothing but python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.bootstrapped
export PYTHONDONTWRITEBYTECODE := 1
# nox finds uv (and the tests find rltap's console script) in the project venv.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: bootstrap test lint typecheck unit integrations matrix bench clean

bootstrap: $(STAMP)

$(STAMP): constraints.txt requirements-dev.txt core/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e core -r requirements-dev.txt
	touch $@

## test: lint, type check, the core suite, every framework integration in its own venv, and the
## integration matrix's table
test: lint typecheck unit integrations matrix

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	rm -rf .matrix
	$(BIN)/pytest

integrations: $(STAMP)
	$(BIN)/nox

matrix: $(STAMP)
	$(BIN)/python -m rltap.testing.matrix .matrix

## bench: the benchmarks in bench/, each printing ratios measured side by side
bench: $(STAMP)
	$(BIN)/python bench/cache_scaling.py --check

## soak: 10,000 sequential session lifecycles through one proxy process; memory per 1,000 printed
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python bench/soak.py soak --sessions 10000

clean:
	rm -rf $(VENV) .nox .venv-vllm .matrix
