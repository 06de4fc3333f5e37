"""The test matrix: each framework integration in its own virtual environment.

Frameworks conflict (camel-ai pins pydantic<=2.12.0 while openai-agents needs >=2.12.2), so each
integration's tests run in a venv of their own. `make test` runs every session here after the core
suite; `nox -s "integration(framework='camel')"` runs one. `nox -s areal` runs `rltap.areal`
against AReaL 1.0.4 itself (integrations/areal/README.md); `nox -s "trainer(plugin='trl')"` runs a
trainer plugin's tests in its trainer's venv.

Venvs are made with uv when it is installed (it links packages from its cache, so the three venvs
share one copy of torch); the torch pin then names the CPU build in the local wheel folder, which
uv, unlike pip, does not look into by itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

FRAMEWORKS = ["openai_agents", "camel", "langchain"]
# Trainer plugins: rltap agents inside another trainer's loop (integrations/<name>, its trainer's
# range in its pyproject). Each session's venv holds the plugin, its trainer and the LangChain
# adapter, whose agent the plugin's end-to-end tests train.
TRAINERS = ["trl", "verl"]
# Frameworks that need no adapter: each is pointed at the proxy by its own base-URL setting, and
# its tests (integrations/compat/<name>/tests) run in a venv of its own with the framework range
# of integrations/compat/<name>/requirements.txt.
COMPAT = ["pydantic_ai", "smolagents", "autogen", "agno", "llamaindex", "haystack", "dspy"]
TEST_TOOLS = ["pytest>=8", "pytest-asyncio>=0.24", "packaging>=24"]
MYPY = "mypy>=1.11"  # as requirements-dev.txt: `mypy --strict` on each adapter
# The repository's tools (dev/, not published): the integration matrix and the README runner.
DEV = "dev"
LOCAL_WHEELS = Path("/opt/wheels")
AREAL = "areal==1.0.4"
# AReaL is installed with --no-deps: it pins torch<2.11 and transformers<=5.3 (and CUDA-only
# packages: sglang, vllm, flash-attn), while this machine's wheel is torch 2.13+cpu. These are
# the modules its agentic API (`areal.experimental.openai`, `areal.api`) imports, the one list.
AREAL_IMPORTS = [
    "aiohttp", "colorlog", "tenacity", "flask", "torchdata", "lark", "hydra-core", "ray", "numba",
    "pillow", "einops", "aiofiles",
]  # fmt: skip


def _install(session: nox.Session, *requirements: str) -> None:
    options = ["-c", "constraints.txt"]
    if session.venv_backend == "uv":
        if LOCAL_WHEELS.is_dir() and any(LOCAL_WHEELS.glob("torch-2.13.0+cpu-*.whl")):
            options += ["--find-links", str(LOCAL_WHEELS), "torch==2.13.0+cpu"]
        certificates = "/etc/ssl/certs/ca-certificates.crt"
        if "SSL_CERT_FILE" not in os.environ and Path(certificates).is_file():
            session.env["SSL_CERT_FILE"] = certificates
    session.install(*options, *requirements)


@nox.session(python="3.11")
@nox.parametrize("framework", FRAMEWORKS)
def integration(session: nox.Session, framework: str) -> None:
    """Install core (with Ray: each adapter's tests run its example on Ray rollout actors too;
    with `train`: `make demo` and bench/learn_frameworks.py run `rltap train` on the examples in
    these venvs) + one adapter with its framework, then type-check the adapter (mypy strict) and
    run its tests."""
    core = "core[embedded,testing,ray,train]"
    adapter = f"integrations/{framework}"
    _install(session, "-e", core, "-e", DEV, "-e", adapter, *TEST_TOOLS, MYPY)
    # The adapter typed against the framework it is installed with (only this venv has it); the
    # cache stays in the venv, as another venv's copy of rltap or of a framework would be stale.
    cache = Path(session.virtualenv.location) / ".mypy_cache"
    session.run("mypy", "--strict", "--cache-dir", str(cache), "-p", f"rltap_{framework}")
    session.run("pytest", "-q", "-p", "no:cacheprovider", f"{adapter}/tests")


@nox.session(python="3.11")
@nox.parametrize("plugin", TRAINERS)
def trainer(session: nox.Session, plugin: str) -> None:
    """Core + one trainer plugin with its trainer + the LangChain adapter, then the plugin typed
    (mypy strict) and its tests."""
    core = "core[embedded,testing,train]"
    plugin_dir = f"integrations/{plugin}"
    _install(
        session, "-e", core, "-e", DEV, "-e", "integrations/langchain", "-e", plugin_dir,
        *TEST_TOOLS, MYPY,
    )  # fmt: skip
    cache = Path(session.virtualenv.location) / ".mypy_cache"
    session.run("mypy", "--strict", "--cache-dir", str(cache), "-p", f"rltap_{plugin}")
    session.run("pytest", "-q", "-p", "no:cacheprovider", f"{plugin_dir}/tests")


@nox.session(python="3.11")
@nox.parametrize("framework", COMPAT)
def compat(session: nox.Session, framework: str) -> None:
    """Core with the scripted engine + one framework that needs no adapter, then its tests."""
    folder = f"integrations/compat/{framework}"
    core = "core[embedded,testing]"
    _install(session, "-e", core, "-e", DEV, "-r", f"{folder}/requirements.txt", *TEST_TOOLS)
    session.run("pytest", "-q", "-p", "no:cacheprovider", f"{folder}/tests")


@nox.session(python="3.11")
def areal(session: nox.Session) -> None:
    """AReaL 1.0.4 installed next to core: `rltap.areal` against AReaL's own classes and client."""
    _install(session, "-e", "core[embedded,testing]", *TEST_TOOLS)
    session.install("--no-deps", AREAL)
    _install(session, *AREAL_IMPORTS)
    session.run("pytest", "-q", "-p", "no:cacheprovider", "integrations/areal/tests")
