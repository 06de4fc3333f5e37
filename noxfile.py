"""The test matrix: each framework integration in its own virtual environment.

Frameworks conflict (camel-ai pins pydantic<=2.12.0 while openai-agents needs >=2.12.2), so each
integration's tests run in a venv of their own. `make test` runs every session here after the core
suite; `nox -s "integration(framework='camel')"` runs one.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

FRAMEWORKS = ["openai_agents", "camel", "langchain"]
TEST_TOOLS = ["pytest>=8", "pytest-asyncio>=0.24", "packaging>=24"]


@nox.session(python="3.11")
@nox.parametrize("framework", FRAMEWORKS)
def integration(session: nox.Session, framework: str) -> None:
    """Install core + one adapter with its framework, then run that adapter's tests."""
    session.install("-q", "-c", "constraints.txt", "-e", "core", "-e", f"integrations/{framework}")
    session.install("-q", "-c", "constraints.txt", *TEST_TOOLS)
    session.run("pytest", "-q", "-p", "no:cacheprovider", f"integrations/{framework}/tests")
