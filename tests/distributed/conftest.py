"""One local Ray cluster for the whole folder (2 CPUs: the tests' rollout actors take 1 each).

Starting it takes seconds; every test's actors come and go on it. Drivers run in this process
(already connected, so `--ray ADDRESS` is a no-op) or as a `rltap` process joining by address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray

AGENTS_FILE = Path(__file__).parent / "agents" / "ray_agents.py"


@pytest.fixture(scope="package")
def ray_address() -> Iterator[str]:
    """The GCS address of a local cluster started here (what `--ray ADDRESS` takes)."""
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="package")
def ray_agent() -> Callable[[str], str]:
    def spec(name: str) -> str:
        return f"{AGENTS_FILE}:{name}"

    return spec
